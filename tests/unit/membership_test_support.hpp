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
// lets them write one after another, each once the writer before it has made its next store
// call after its write (and that call returned): proposals made at once reach the store at once,
// and a writer that did not check what was there would read back its own world before the next
// one overwrote it.
class ProposalGate {
 public:
  explicit ProposalGate(int expected) : expected_(expected) {}
  void before_write() {
    std::unique_lock lock(mutex_);
    const int order = arrived_++;
    changed_.notify_all();
    changed_.wait_for(lock, 100ms, [&] { return arrived_ >= expected_; });
    // The bound only keeps a writer that makes no call after its write from holding the others
    // for ever; every writer of the membership code makes one (it announces the change).
    changed_.wait_for(lock, 5s, [&] { return turns_passed_ >= order; });
  }
  void pass_turn() {
    std::lock_guard lock(mutex_);
    ++turns_passed_;
    changed_.notify_all();
  }

 private:
  std::mutex mutex_;
  std::condition_variable changed_;
  int arrived_ = 0;
  int turns_passed_ = 0;
  int expected_;
};

// A worker's view of the shared store, whose lease renewals can be held back: the worker looks
// hung (or cut off) to the others, and learns its fate when renewals get through again.
class HeartbeatSwitchStore final : public Store {
 public:
  explicit HeartbeatSwitchStore(std::shared_ptr<Store> inner) : inner_(std::move(inner)) {}
  void hold_renewals(bool hold) { hold_.store(hold); }
  // While set, a renewal fails as against a store that does not answer (a stopped server):
  // the worker keeps trying, and its lease runs out in the store meanwhile.
  void fail_renewals(bool fail) { fail_.store(fail); }
  // While set, a renewal blocks until it is cleared, as the heartbeat thread of a process that
  // was SIGSTOPped: nothing is renewed and the worker itself has not heard yet.
  void stall_renewals(bool stall) {
    const std::lock_guard lock(stall_mutex_);
    stalled_ = stall;
    unstalled_.notify_all();
  }
  void gate_world_writes(std::shared_ptr<ProposalGate> gate) { gate_ = std::move(gate); }

  void set(const std::string& k, const std::string& v) override {
    const bool world = gated(k);
    inner_->set(k, v);
    call_returned(world);
  }
  // Held renewals hold the heartbeat's beat counter too: the worker beats no more.
  void set(const std::string& k, const std::string& v, LeaseId l) override {
    if (hold_.load() && k.starts_with("membership/beats/")) return;
    const bool world = gated(k);
    inner_->set(k, v, l);
    call_returned(world);
  }
  std::string get(const std::string& k, Duration t) override { return returned(inner_->get(k, t)); }
  std::int64_t add(const std::string& k, std::int64_t d) override {
    return returned(inner_->add(k, d));
  }
  std::string compare_set(const std::string& k, const std::string& e,
                          const std::string& d) override {
    const bool world = gated(k);
    auto previous = inner_->compare_set(k, e, d);
    call_returned(world);
    return previous;
  }
  void wait(const std::vector<std::string>& k, Duration t) override {
    inner_->wait(k, t);
    call_returned(false);
  }
  std::optional<std::string> wait_for_change(const std::string& k,
                                             const std::optional<std::string>& known,
                                             Duration t) override {
    return returned(inner_->wait_for_change(k, known, t));
  }
  std::vector<std::pair<std::string, std::string>> list(const std::string& p) override {
    return returned(inner_->list(p));
  }
  bool check(const std::string& k) override { return returned(inner_->check(k)); }
  bool remove(const std::string& k) override { return returned(inner_->remove(k)); }
  LeaseId grant_lease(Duration ttl) override { return inner_->grant_lease(ttl); }
  void keep_alive(LeaseId l) override {
    {
      std::unique_lock lock(stall_mutex_);
      unstalled_.wait(lock, [&] { return !stalled_; });
    }
    if (fail_.load()) throw Error("test store: no answer to keep_alive (the server is stopped)");
    if (!hold_.load()) inner_->keep_alive(l);
  }
  void revoke_lease(LeaseId l) override { inner_->revoke_lease(l); }

 private:
  std::mutex stall_mutex_;
  std::condition_variable unstalled_;
  bool stalled_ = false;

  // Whether `key` is a world write the gate orders (having waited for its turn).
  bool gated(const std::string& key) {
    if (!gate_ || !key.starts_with("membership/world/")) return false;
    gate_->before_write();
    return true;
  }
  // After every call: the first call that returns on the thread after its world write passes
  // the gate's turn on (the heartbeat's calls, on another thread, do not).
  void call_returned(bool wrote_world) {
    if (!gate_) return;
    std::lock_guard lock(turn_mutex_);
    const auto me = std::this_thread::get_id();
    if (turn_held_by_ == me) {
      turn_held_by_ = std::thread::id();
      gate_->pass_turn();
    }
    if (wrote_world) turn_held_by_ = me;
  }
  template <class Value>
  Value returned(Value value) {
    call_returned(false);
    return value;
  }

  std::shared_ptr<Store> inner_;
  std::atomic<bool> hold_{false};
  std::atomic<bool> fail_{false};
  std::shared_ptr<ProposalGate> gate_;
  std::mutex turn_mutex_;
  std::thread::id turn_held_by_;  // the thread whose world write waits to pass the turn
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
