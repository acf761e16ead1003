#pragma once
// The rendezvous key-value store ranks use to find each other (addresses, tokens, group ids).

#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "tessera/base/time.hpp"

namespace tessera {

// Values are byte strings: std::string is used as a binary-safe container.
//
// Thread-safety: every method may be called from any thread concurrently.
// Blocking: set/add/compare_set/remove return once the store has applied the change; get and
// wait block until the keys exist or the timeout passes, then throw tessera::Timeout.
// Errors: a store that cannot reach its server throws tessera::Error after its own retries.
class Store {
 public:
  virtual ~Store() = default;

  // Creates or overwrites key. Wakes every waiter on key.
  virtual void set(const std::string& key, const std::string& value) = 0;

  // Returns the value of key, waiting until it exists. Throws Timeout naming the key.
  [[nodiscard]] virtual std::string get(const std::string& key, Duration timeout) = 0;

  // Atomically adds delta to the integer stored at key (absent counts as 0) and returns the
  // new value. The value is stored as decimal text, readable with get().
  virtual std::int64_t add(const std::string& key, std::int64_t delta) = 0;

  // Atomically: if key's value equals expected (absent matches the empty string), sets it to
  // desired. Returns the value key holds afterwards, so a caller won iff result == desired.
  virtual std::string compare_set(const std::string& key, const std::string& expected,
                                  const std::string& desired) = 0;

  // Blocks until every key exists. Throws Timeout naming the keys still missing.
  virtual void wait(const std::vector<std::string>& keys, Duration timeout) = 0;

  // True if key exists now. Never blocks on the key.
  [[nodiscard]] virtual bool check(const std::string& key) = 0;

  // Deletes key; returns whether it existed.
  virtual bool remove(const std::string& key) = 0;

  // Where other processes reach this store ("host:port" for a tcp store), so a process that
  // serves one can hand the address to its workers; empty for a store with no address of its
  // own (in-memory). Never blocks.
  [[nodiscard]] virtual std::string address() const { return {}; }
};

// Prepends "prefix/" to every key, so that groups, jobs or generations share one store
// without colliding. Shares ownership of the underlying store.
class PrefixStore final : public Store {
 public:
  PrefixStore(std::string prefix, std::shared_ptr<Store> inner);

  void set(const std::string& key, const std::string& value) override;
  [[nodiscard]] std::string get(const std::string& key, Duration timeout) override;
  std::int64_t add(const std::string& key, std::int64_t delta) override;
  std::string compare_set(const std::string& key, const std::string& expected,
                          const std::string& desired) override;
  void wait(const std::vector<std::string>& keys, Duration timeout) override;
  [[nodiscard]] bool check(const std::string& key) override;
  bool remove(const std::string& key) override;
  [[nodiscard]] std::string address() const override { return inner_->address(); }

 private:
  [[nodiscard]] std::string full(const std::string& key) const { return prefix_ + "/" + key; }
  std::string prefix_;
  std::shared_ptr<Store> inner_;
};

// A store in this process's memory: the store of the `local` transport and of tests.
std::shared_ptr<Store> make_memory_store();

}  // namespace tessera
