#pragma once
// The rendezvous key-value store ranks use to find each other (addresses, tokens, group ids),
// and, for worlds that change while they run, to tell who is still there: leases, watches and
// listing by prefix.

#include <chrono>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "tessera/base/error.hpp"
#include "tessera/base/time.hpp"

namespace tessera {

// A lease: keys bound to it live while its holder keeps renewing it, and vanish together when
// it stops (a process that died, hung or lost its network). Opaque, as etcd's lease ids are;
// only meaningful to the store that granted it. LeaseId{} (0) is never granted.
enum class LeaseId : std::int64_t {};

// How late a store may notice an expired lease: its keys are gone by ttl + kLeaseExpirySlack
// after the last renewal, load aside. etcd is later (1 s): plugins/stores/etcd/README.md.
inline constexpr Duration kLeaseExpirySlack{250};

// The longest lease a store grants and the longest wait it honours: 30 days.
inline constexpr Duration kMaxStoreDuration{30LL * 24 * 3600 * 1000};

// The lease is not alive in this store: it expired, was revoked, or was never granted here.
// From keep_alive it means that the rest of the job has been told this process is gone (its
// keys were deleted and their watchers woken): rejoin as a newcomer with a new lease rather
// than carry on as the old member.
class TESSERA_ERROR_API LeaseExpired : public Error {
 public:
  LeaseExpired(const std::string& message, LeaseId lease) : Error(message), lease_(lease) {}
  ~LeaseExpired() override;
  [[nodiscard]] LeaseId lease() const noexcept { return lease_; }

 private:
  LeaseId lease_;
};

// Values are byte strings: std::string is used as a binary-safe container. Keys order bytewise
// (unsigned), as std::string compares them.
//
// Thread-safety: every method may be called from any thread concurrently.
// Blocking: set/add/compare_set/remove and the lease calls return once the store has applied
// the change; get, wait and wait_for_change block until their condition holds or the timeout
// passes, then throw tessera::Timeout. Timeouts longer than kMaxStoreDuration are cut to it.
// Errors: a store that cannot reach its server throws tessera::Error after its own retries.
//
// Leases, as in etcd: grant_lease starts one, keep_alive renews it, revoke_lease ends it, and
// set(key, value, lease) binds a key to it. A lease expires `ttl` after it was granted or last
// renewed, on the store's clock (the memory store's process, the tcp store's server, the wall
// clocks of the hosts sharing a file store's folder); then, or at revoke_lease, every key bound
// to it is deleted at once, as by remove(), waking every watcher of those keys. Seen by a
// caller: a bound key is still there until ttl after the grant or keep_alive call began, and
// gone for every call made later than ttl + kLeaseExpirySlack after that call returned.
// A lease is not tied to a connection: a client that reconnects keeps its leases.
class Store {
 public:
  virtual ~Store() = default;

  // Creates or overwrites key, unbound from any lease (it stays until removed). Wakes every
  // waiter and watcher of key.
  virtual void set(const std::string& key, const std::string& value) = 0;

  // As set, but key is bound to `lease` and deleted when the lease ends; a later plain set
  // unbinds it again. Throws LeaseExpired (and writes nothing) when the lease is not alive.
  virtual void set(const std::string& key, const std::string& value, LeaseId lease) = 0;

  // Returns the value of key, waiting until it exists. Throws Timeout naming the key.
  [[nodiscard]] virtual std::string get(const std::string& key, Duration timeout) = 0;

  // Atomically adds delta to the integer stored at key (absent counts as 0) and returns the
  // new value. The value is stored as decimal text, readable with get(). A key bound to a
  // lease stays bound; one it creates is unbound.
  virtual std::int64_t add(const std::string& key, std::int64_t delta) = 0;

  // Atomically: if key's value equals expected (absent matches the empty string), sets it to
  // desired. Returns the value key holds afterwards, so a caller won iff result == desired.
  // Leaves key's lease binding as it is, like add.
  virtual std::string compare_set(const std::string& key, const std::string& expected,
                                  const std::string& desired) = 0;

  // Blocks until every key exists. Throws Timeout naming the keys still missing.
  virtual void wait(const std::vector<std::string>& keys, Duration timeout) = 0;

  // Blocks until key's value differs from `known` (nullopt: absent) and returns what it holds
  // then (nullopt: absent), at once if it differs already. A deletion counts, by remove() or
  // by the end of the key's lease. Values, not events, are compared: a change undone before
  // the store looks is not seen, so a caller that must see every change watches a counter.
  // Throws Timeout naming the key. Memory and tcp stores wake on the change itself; the file
  // store polls (see its README).
  virtual std::optional<std::string> wait_for_change(const std::string& key,
                                                     const std::optional<std::string>& known,
                                                     Duration timeout) = 0;

  // Every key that starts with `prefix` ("" lists all) with its value, sorted by key; one
  // consistent snapshot. Never blocks on keys. Throws InvalidArgument when the listing is too
  // large for the store to return at once (the tcp store's 64 MiB message limit).
  [[nodiscard]] virtual std::vector<std::pair<std::string, std::string>> list(
      const std::string& prefix) = 0;

  // True if key exists now. Never blocks on the key.
  [[nodiscard]] virtual bool check(const std::string& key) = 0;

  // Deletes key (unbinding it from its lease); returns whether it existed.
  virtual bool remove(const std::string& key) = 0;

  // Starts a lease that ends ttl from now unless renewed. Throws InvalidArgument when ttl is
  // not in 1 ms..kMaxStoreDuration or not one the store grants (etcd: whole seconds). Choose
  // ttl above the renewal interval plus a live holder's longest pause (a few seconds).
  [[nodiscard]] virtual LeaseId grant_lease(Duration ttl) = 0;

  // Renews `lease` for the ttl it was granted with, from now. Throws LeaseExpired when the
  // lease is no longer alive: its keys are already gone.
  virtual void keep_alive(LeaseId lease) = 0;

  // Ends `lease` now and deletes its keys, waking their watchers. Does nothing for a lease that
  // has already ended, so a holder may call it on its way out whatever happened before.
  virtual void revoke_lease(LeaseId lease) = 0;

  // Where other processes reach this store ("host:port" for a tcp store), so a process that
  // serves one can hand the address to its workers; empty for a store with no address of its
  // own (in-memory). Never blocks.
  [[nodiscard]] virtual std::string address() const { return {}; }
};

// Prepends "prefix/" to every key, so that groups, jobs or generations share one store
// without colliding; list() returns keys without it. Leases are the inner store's: a lease
// granted through one PrefixStore serves keys of any other over the same store. Shares
// ownership of the underlying store.
class PrefixStore final : public Store {
 public:
  PrefixStore(std::string prefix, std::shared_ptr<Store> inner);

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
  [[nodiscard]] LeaseId grant_lease(Duration ttl) override { return inner_->grant_lease(ttl); }
  void keep_alive(LeaseId lease) override { inner_->keep_alive(lease); }
  void revoke_lease(LeaseId lease) override { inner_->revoke_lease(lease); }
  [[nodiscard]] std::string address() const override { return inner_->address(); }

 private:
  [[nodiscard]] std::string full(const std::string& key) const { return prefix_ + "/" + key; }
  std::string prefix_;
  std::shared_ptr<Store> inner_;
};

}  // namespace tessera
