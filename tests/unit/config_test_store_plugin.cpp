// A small in-memory store plugin, so that the config tests can select a store by name
// (runtime.store) without depending on other plugins. It forwards to the core's memory store.
#include "memory_store.hpp"
#include "tessera/sdk/plugin.hpp"

namespace {

class ConfigTestStore final : public tessera::Store {
 public:
  explicit ConfigTestStore(const tessera::Options& /*options*/) {}

  void set(const std::string& key, const std::string& value) override { inner_->set(key, value); }
  void set(const std::string& key, const std::string& value, tessera::LeaseId lease) override {
    inner_->set(key, value, lease);
  }
  std::string get(const std::string& key, tessera::Duration timeout) override {
    return inner_->get(key, timeout);
  }
  std::int64_t add(const std::string& key, std::int64_t delta) override {
    return inner_->add(key, delta);
  }
  std::string compare_set(const std::string& key, const std::string& expected,
                          const std::string& desired) override {
    return inner_->compare_set(key, expected, desired);
  }
  void wait(const std::vector<std::string>& keys, tessera::Duration timeout) override {
    inner_->wait(keys, timeout);
  }
  std::optional<std::string> wait_for_change(const std::string& key,
                                             const std::optional<std::string>& known,
                                             tessera::Duration timeout) override {
    return inner_->wait_for_change(key, known, timeout);
  }
  std::vector<std::pair<std::string, std::string>> list(const std::string& prefix) override {
    return inner_->list(prefix);
  }
  bool check(const std::string& key) override { return inner_->check(key); }
  bool remove(const std::string& key) override { return inner_->remove(key); }
  tessera::LeaseId grant_lease(tessera::Duration ttl) override { return inner_->grant_lease(ttl); }
  void keep_alive(tessera::LeaseId lease) override { inner_->keep_alive(lease); }
  void revoke_lease(tessera::LeaseId lease) override { inner_->revoke_lease(lease); }

 private:
  std::shared_ptr<tessera::Store> inner_ = tessera::memory::make_memory_store();
};

}  // namespace

TESSERA_PLUGIN(store, "cfg_store", "0.1.0", "config-test in-memory store", TESSERA_NO_ALIASES,
               TESSERA_NO_OPTIONS, TESSERA_NO_CAPABILITIES, ConfigTestStore)
