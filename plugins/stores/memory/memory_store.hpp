#pragma once
// Store `memory`: the core's in-process store behind the plugin interface, so that
// `runtime.store = memory` names it like any other store. Only ranks that share this one
// object (threads of one process) can meet in it.

#include <memory>

#include "tessera/plugin/options.hpp"
#include "tessera/plugin/store.hpp"

namespace tessera::memory {

class MemoryStore final : public Store {
 public:
  explicit MemoryStore(const Options& options);

  void set(const std::string& key, const std::string& value) override { inner_->set(key, value); }
  void set(const std::string& key, const std::string& value, LeaseId lease) override {
    inner_->set(key, value, lease);
  }
  [[nodiscard]] std::string get(const std::string& key, Duration timeout) override {
    return inner_->get(key, timeout);
  }
  std::int64_t add(const std::string& key, std::int64_t delta) override {
    return inner_->add(key, delta);
  }
  std::string compare_set(const std::string& key, const std::string& expected,
                          const std::string& desired) override {
    return inner_->compare_set(key, expected, desired);
  }
  void wait(const std::vector<std::string>& keys, Duration timeout) override {
    inner_->wait(keys, timeout);
  }
  std::optional<std::string> wait_for_change(const std::string& key,
                                             const std::optional<std::string>& known,
                                             Duration timeout) override {
    return inner_->wait_for_change(key, known, timeout);
  }
  [[nodiscard]] std::vector<std::pair<std::string, std::string>> list(
      const std::string& prefix) override {
    return inner_->list(prefix);
  }
  [[nodiscard]] bool check(const std::string& key) override { return inner_->check(key); }
  bool remove(const std::string& key) override { return inner_->remove(key); }
  [[nodiscard]] LeaseId grant_lease(Duration ttl) override { return inner_->grant_lease(ttl); }
  void keep_alive(LeaseId lease) override { inner_->keep_alive(lease); }
  void revoke_lease(LeaseId lease) override { inner_->revoke_lease(lease); }

 private:
  std::shared_ptr<Store> inner_;
};

}  // namespace tessera::memory
