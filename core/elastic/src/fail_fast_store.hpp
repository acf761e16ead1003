#pragma once
// The job's store as an elastic worker uses it: once the store has given no answer for longer
// than a worker's lease, every lease in it has ended on the store's own clock, this worker's
// too, so nothing the worker could still ask it would let the run go on. From the first request
// that fails then, every later one fails at once with that failure instead of spending the
// store's own timeout again ([store.etcd] timeout, 30 s with retries): the worker's way out (the
// watcher, the regroup, the lease's revocation) costs one store timeout, not one per request.
#include <chrono>
#include <memory>
#include <mutex>
#include <optional>
#include <string>

#include "tessera/base/time.hpp"
#include "tessera/plugin/store.hpp"

namespace tessera::elastic {

// Thread-safety: every method may be called from any thread, as the inner store's.
class FailFastStore final : public Store {
 public:
  // `lease_ttl`: the workers' lease (failure_timeout). The silence is counted from the last
  // request the inner store answered (a value, or an answer such as LeaseExpired), or from
  // construction.
  FailFastStore(std::shared_ptr<Store> inner, Duration lease_ttl);

  // How long the store had given no answer when it was given up on; nullopt while it was not.
  [[nodiscard]] std::optional<Duration> given_up_after() const;

  void set(const std::string& key, const std::string& value) override;
  void set(const std::string& key, const std::string& value, LeaseId lease) override;
  [[nodiscard]] std::string get(const std::string& key, Duration timeout) override;
  std::int64_t add(const std::string& key, std::int64_t delta) override;
  std::string compare_set(const std::string& key, const std::string& expected,
                          const std::string& desired) override;
  void wait(const std::vector<std::string>& keys, Duration timeout) override;
  std::optional<std::string> wait_for_change(const std::string& key,
                                             const std::optional<std::string>& known,
                                             Duration timeout) override;
  [[nodiscard]] std::vector<std::pair<std::string, std::string>> list(
      const std::string& prefix) override;
  [[nodiscard]] bool check(const std::string& key) override;
  bool remove(const std::string& key) override;
  [[nodiscard]] LeaseId grant_lease(Duration ttl) override;
  void keep_alive(LeaseId lease) override;
  void revoke_lease(LeaseId lease) override;
  [[nodiscard]] std::string address() const override { return inner_->address(); }

 private:
  using Clock = std::chrono::steady_clock;
  // Runs `request` on the inner store unless the store was given up on (then throws at once).
  template <class Request>
  auto ask(Request&& request) -> decltype(request(std::declval<Store&>()));
  void answered();
  void failed(const std::exception& failure);

  std::shared_ptr<Store> inner_;
  Duration lease_ttl_;
  mutable std::mutex mutex_;
  Clock::time_point last_answer_;
  std::optional<std::string> given_up_;  // the message every later request throws
  std::optional<Duration> given_up_after_;
};

}  // namespace tessera::elastic
