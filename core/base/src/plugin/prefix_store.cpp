#include <utility>

#include "tessera/base/error.hpp"
#include "tessera/plugin/store.hpp"

namespace tessera {

PrefixStore::PrefixStore(std::string prefix, std::shared_ptr<Store> inner)
    : prefix_(std::move(prefix)), inner_(std::move(inner)) {
  TESSERA_CHECK(inner_ != nullptr, "PrefixStore needs an inner store");
}

void PrefixStore::set(const std::string& key, const std::string& value) {
  inner_->set(full(key), value);
}

void PrefixStore::set(const std::string& key, const std::string& value, LeaseId lease) {
  inner_->set(full(key), value, lease);
}

std::string PrefixStore::get(const std::string& key, Duration timeout) {
  return inner_->get(full(key), timeout);
}

std::int64_t PrefixStore::add(const std::string& key, std::int64_t delta) {
  return inner_->add(full(key), delta);
}

std::string PrefixStore::compare_set(const std::string& key, const std::string& expected,
                                     const std::string& desired) {
  return inner_->compare_set(full(key), expected, desired);
}

void PrefixStore::wait(const std::vector<std::string>& keys, Duration timeout) {
  std::vector<std::string> full_keys;
  full_keys.reserve(keys.size());
  for (const auto& key : keys) full_keys.push_back(full(key));
  inner_->wait(full_keys, timeout);
}

std::optional<std::string> PrefixStore::wait_for_change(const std::string& key,
                                                        const std::optional<std::string>& known,
                                                        Duration timeout) {
  return inner_->wait_for_change(full(key), known, timeout);
}

std::vector<std::pair<std::string, std::string>> PrefixStore::list(const std::string& prefix) {
  auto found = inner_->list(full(prefix));
  const auto own = full("").size();
  for (auto& entry : found) entry.first.erase(0, own);
  return found;
}

bool PrefixStore::check(const std::string& key) {
  return inner_->check(full(key));
}

bool PrefixStore::remove(const std::string& key) {
  return inner_->remove(full(key));
}

}  // namespace tessera
