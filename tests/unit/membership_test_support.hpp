#pragma once
// For the membership tests: store decorators (a worker whose renewals can be held back, a gate
// that makes racing proposals reach the store together) and workers run on threads together.

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstddef>
#include <functional>
#include <future>
#include <latch>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "tessera/elastic/membership.hpp"
#include "tessera/plugin/store.hpp"

namespace tessera::membership_test {

using namespace std::chrono_literals;

// Holds every writer of a world key until `expected` writers have come (or 100 ms passed), then
// lets them write one after another, 5 ms apart: proposals made at once reach the store at once,
// and a writer that did not check what was there would read back its own world before the next
// one overwrote it.
class ProposalGate {
 public:
  explicit ProposalGate(int expected) : expected_(expected) {}
  void before_write() {
    std::unique_lock lock(mutex_);
    const int order = arrived_++;
    arrivals_.notify_all();
    arrivals_.wait_for(lock, 100ms, [&] { return arrived_ >= expected_; });
    lock.unlock();
    std::this_thread::sleep_for(order * 5ms);
  }

 private:
  std::mutex mutex_;
  std::condition_variable arrivals_;
  int arrived_ = 0;
  int expected_;
};

// A worker's view of the shared store, whose lease renewals can be held back: the worker looks
// hung (or cut off) to the others, and learns its fate when renewals get through again.
class HeartbeatSwitchStore final : public Store {
 public:
  explicit HeartbeatSwitchStore(std::shared_ptr<Store> inner) : inner_(std::move(inner)) {}
  void hold_renewals(bool hold) { hold_.store(hold); }
  void gate_world_writes(std::shared_ptr<ProposalGate> gate) { gate_ = std::move(gate); }

  void set(const std::string& k, const std::string& v) override {
    gated(k);
    inner_->set(k, v);
  }
  // Held renewals hold the heartbeat's beat counter too: the worker beats no more.
  void set(const std::string& k, const std::string& v, LeaseId l) override {
    if (hold_.load() && k.starts_with("membership/beats/")) return;
    inner_->set(k, v, l);
  }
  std::string get(const std::string& k, Duration t) override { return inner_->get(k, t); }
  std::int64_t add(const std::string& k, std::int64_t d) override { return inner_->add(k, d); }
  std::string compare_set(const std::string& k, const std::string& e,
                          const std::string& d) override {
    gated(k);
    return inner_->compare_set(k, e, d);
  }
  void wait(const std::vector<std::string>& k, Duration t) override { inner_->wait(k, t); }
  std::optional<std::string> wait_for_change(const std::string& k,
                                             const std::optional<std::string>& known,
                                             Duration t) override {
    return inner_->wait_for_change(k, known, t);
  }
  std::vector<std::pair<std::string, std::string>> list(const std::string& p) override {
    return inner_->list(p);
  }
  bool check(const std::string& k) override { return inner_->check(k); }
  bool remove(const std::string& k) override { return inner_->remove(k); }
  LeaseId grant_lease(Duration ttl) override { return inner_->grant_lease(ttl); }
  void keep_alive(LeaseId l) override {
    if (!hold_.load()) inner_->keep_alive(l);
  }
  void revoke_lease(LeaseId l) override { inner_->revoke_lease(l); }

 private:
  void gated(const std::string& key) {
    if (gate_ && key.starts_with("membership/world/")) gate_->before_write();
  }
  std::shared_ptr<Store> inner_;
  std::atomic<bool> hold_{false};
  std::shared_ptr<ProposalGate> gate_;
};

// Runs `call` on worker(id) for every id on its own thread, all starting together once every
// thread is up (a slow thread start must not pass for a slow worker); returns the views in the
// ids' order and rethrows the first error.
inline std::vector<WorldView> on_threads(
    const std::vector<std::string>& ids,
    const std::function<Membership&(const std::string&)>& worker,
    const std::function<WorldView(Membership&)>& call) {
  std::latch start(static_cast<std::ptrdiff_t>(ids.size()));
  std::vector<std::future<WorldView>> results;
  for (const auto& id : ids) {
    results.push_back(std::async(std::launch::async, [&, id] {
      start.arrive_and_wait();
      return call(worker(id));
    }));
  }
  std::vector<WorldView> views;
  for (auto& result : results) views.push_back(result.get());
  return views;
}

}  // namespace tessera::membership_test
