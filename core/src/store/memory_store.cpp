#include <charconv>
#include <condition_variable>
#include <map>
#include <mutex>
#include <string>
#include <vector>

#include "tessera/base/error.hpp"
#include "tessera/plugin/store.hpp"
#include "tessera/transport_kit/transport_support.hpp"

namespace tessera {

namespace {

// One mutex and one condition variable: the store carries rendezvous traffic (a few keys per
// rank per group), never data, so contention does not matter and simplicity does.
class MemoryStore final : public Store {
 public:
  void set(const std::string& key, const std::string& value) override {
    {
      std::lock_guard lock(mutex_);
      values_[key] = value;
    }
    changed_.notify_all();
  }

  std::string get(const std::string& key, Duration timeout) override {
    std::unique_lock lock(mutex_);
    if (!changed_.wait_until(lock, deadline_after(timeout),
                             [&] { return values_.contains(key); })) {
      throw Timeout("memory store: key '" + key + "' was not set within " +
                    std::to_string(timeout.count()) + " ms");
    }
    return values_.at(key);
  }

  std::int64_t add(const std::string& key, std::int64_t delta) override {
    std::int64_t result = 0;
    {
      std::lock_guard lock(mutex_);
      auto& value = values_[key];
      std::int64_t current = 0;
      if (!value.empty()) {
        const auto* end = value.data() + value.size();
        const auto [ptr, ec] = std::from_chars(value.data(), end, current);
        if (ec != std::errc() || ptr != end) {
          throw InvalidArgument("memory store: add on key '" + key + "' whose value '" + value +
                                "' is not an integer");
        }
      }
      result = current + delta;
      value = std::to_string(result);
    }
    changed_.notify_all();
    return result;
  }

  std::string compare_set(const std::string& key, const std::string& expected,
                          const std::string& desired) override {
    std::string result;
    {
      std::lock_guard lock(mutex_);
      const auto it = values_.find(key);
      const bool matches = it == values_.end() ? expected.empty() : it->second == expected;
      if (!matches) return it == values_.end() ? std::string() : it->second;
      values_[key] = desired;
      result = desired;
    }
    changed_.notify_all();
    return result;
  }

  void wait(const std::vector<std::string>& keys, Duration timeout) override {
    std::unique_lock lock(mutex_);
    const auto all_present = [&] {
      for (const auto& key : keys) {
        if (!values_.contains(key)) return false;
      }
      return true;
    };
    if (changed_.wait_until(lock, deadline_after(timeout), all_present)) return;
    std::string missing;
    for (const auto& key : keys) {
      if (values_.contains(key)) continue;
      missing += (missing.empty() ? "'" : ", '") + key + "'";
    }
    throw Timeout("memory store: key(s) " + missing + " not set within " +
                  std::to_string(timeout.count()) + " ms");
  }

  bool check(const std::string& key) override {
    std::lock_guard lock(mutex_);
    return values_.contains(key);
  }

  bool remove(const std::string& key) override {
    std::lock_guard lock(mutex_);
    return values_.erase(key) > 0;
  }

 private:
  std::mutex mutex_;
  std::condition_variable changed_;
  std::map<std::string, std::string> values_;
};

}  // namespace

std::shared_ptr<Store> make_memory_store() {
  return std::make_shared<MemoryStore>();
}

}  // namespace tessera
