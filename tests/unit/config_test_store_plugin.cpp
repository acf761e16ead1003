// A small in-memory store plugin, so that the config tests can select a store by name
// (runtime.store) without depending on other plugins.
#include <algorithm>
#include <condition_variable>
#include <map>
#include <mutex>

#include "tessera/base/error.hpp"
#include "tessera/sdk/plugin.hpp"

namespace {

class ConfigTestStore final : public tessera::Store {
 public:
  explicit ConfigTestStore(const tessera::Options& /*options*/) {}

  void set(const std::string& key, const std::string& value) override {
    const std::lock_guard lock(mutex_);
    values_[key] = value;
    changed_.notify_all();
  }

  std::string get(const std::string& key, tessera::Duration timeout) override {
    std::unique_lock lock(mutex_);
    if (!changed_.wait_for(lock, timeout, [&] { return values_.contains(key); })) {
      throw tessera::Timeout("cfg_store: key '" + key + "' did not appear in time");
    }
    return values_[key];
  }

  std::int64_t add(const std::string& key, std::int64_t delta) override {
    const std::lock_guard lock(mutex_);
    auto& value = values_[key];
    value = std::to_string((value.empty() ? 0 : std::stoll(value)) + delta);
    changed_.notify_all();
    return std::stoll(value);
  }

  std::string compare_set(const std::string& key, const std::string& expected,
                          const std::string& desired) override {
    const std::lock_guard lock(mutex_);
    auto it = values_.find(key);
    const std::string current = it == values_.end() ? std::string() : it->second;
    if (current != expected) return current;
    values_[key] = desired;
    changed_.notify_all();
    return desired;
  }

  void wait(const std::vector<std::string>& keys, tessera::Duration timeout) override {
    std::unique_lock lock(mutex_);
    const bool all = changed_.wait_for(lock, timeout, [&] {
      return std::all_of(keys.begin(), keys.end(),
                         [&](const auto& k) { return values_.contains(k); });
    });
    if (!all) throw tessera::Timeout("cfg_store: keys did not appear in time");
  }

  bool check(const std::string& key) override {
    const std::lock_guard lock(mutex_);
    return values_.contains(key);
  }

  bool remove(const std::string& key) override {
    const std::lock_guard lock(mutex_);
    return values_.erase(key) > 0;
  }

 private:
  std::mutex mutex_;
  std::condition_variable changed_;
  std::map<std::string, std::string> values_;
};

}  // namespace

TESSERA_PLUGIN(store, "cfg_store", "0.1.0", "config-test in-memory store", TESSERA_NO_ALIASES,
               TESSERA_NO_OPTIONS, TESSERA_NO_CAPABILITIES, ConfigTestStore)
