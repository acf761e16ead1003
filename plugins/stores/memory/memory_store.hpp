#pragma once
// Store `memory`: keys in this process's memory. Only ranks that share this one object
// (threads of one process: the `local` transport, tests) can meet in it; `runtime.store =
// memory`, the default, names it. Tests and tools that need an in-process store without a
// registry link this folder's static library (tessera_store_memory_impl).
//
// One mutex and one condition variable: the store carries rendezvous traffic (a few keys per
// rank per group), never data, so contention does not matter and simplicity does.
//
// Leases need no thread of their own: every call first deletes the keys of leases past their
// deadline, and a blocked caller sleeps no later than the next deadline, so that it deletes
// them (and wakes the others) on time even when nothing else happens.

#include <chrono>
#include <condition_variable>
#include <map>
#include <mutex>
#include <set>
#include <string>
#include <vector>

#include "tessera/plugin/options.hpp"
#include "tessera/plugin/store.hpp"

namespace tessera::memory {

class MemoryStore final : public Store {
 public:
  MemoryStore();
  explicit MemoryStore(const Options& options);  // no options: as MemoryStore()

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

 private:
  using Clock = std::chrono::steady_clock;
  struct Entry {
    std::string value;
    LeaseId lease{};  // LeaseId{}: not bound
  };
  struct Lease {
    Duration ttl;
    Clock::time_point deadline;
    std::set<std::string> keys;
  };

  static LeaseExpired expired(const std::string& what, LeaseId lease);
  // The entry of key, created if absent, bound to `lease` (unbound for LeaseId{}).
  Entry& bind(const std::string& key, LeaseId lease);
  void erase(std::map<std::string, Entry>::iterator it);
  void end_lease(std::map<LeaseId, Lease>::iterator it);
  void expire_leases();
  [[nodiscard]] Clock::time_point next_lease_deadline() const;
  // Waits until `done` holds (true) or the timeout passes (false), ending leases on time.
  template <typename Predicate>
  bool wait_until(std::unique_lock<std::mutex>& lock, Duration timeout, Predicate done);

  std::mutex mutex_;
  std::condition_variable changed_;
  std::map<std::string, Entry> values_;
  // Few leases (one per rank), so the deadline scans over them cost nothing worth indexing.
  std::map<LeaseId, Lease> leases_;
  std::int64_t next_lease_ = 0;
};

// A new, empty in-process store.
[[nodiscard]] std::shared_ptr<Store> make_memory_store();

}  // namespace tessera::memory
