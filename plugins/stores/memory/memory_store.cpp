#include "memory_store.hpp"

#include <algorithm>
#include <charconv>
#include <random>

#include "tessera/base/error.hpp"

namespace tessera::memory {

namespace {

std::string ms_text(Duration d) {
  return std::to_string(d.count()) + " ms";
}

}  // namespace

MemoryStore::MemoryStore() {
  // A random start, so a lease id from another store object is unlikely to name one here.
  std::random_device random;
  next_lease_ = ((static_cast<std::int64_t>(random()) << 31) ^ random()) & 0x3fffffffffffffff;
}

// Waits until `done` holds (true) or the timeout passes (false), ending leases on time.
template <typename Predicate>
bool MemoryStore::wait_until(std::unique_lock<std::mutex>& lock, Duration timeout, Predicate done) {
  const auto deadline = deadline_after(std::min(timeout, kMaxStoreDuration));
  for (;;) {
    expire_leases();
    if (done()) return true;
    if (Clock::now() >= deadline) return false;
    changed_.wait_until(lock, std::min(deadline, next_lease_deadline()));
  }
}

void MemoryStore::set(const std::string& key, const std::string& value) {
  std::lock_guard lock(mutex_);
  expire_leases();
  bind(key, LeaseId{}).value = value;
  changed_.notify_all();
}

void MemoryStore::set(const std::string& key, const std::string& value, LeaseId lease) {
  std::lock_guard lock(mutex_);
  expire_leases();
  if (!leases_.contains(lease)) throw expired("set of key '" + key + "'", lease);
  bind(key, lease).value = value;
  changed_.notify_all();
}

std::string MemoryStore::get(const std::string& key, Duration timeout) {
  std::unique_lock lock(mutex_);
  if (!wait_until(lock, timeout, [&] { return values_.contains(key); })) {
    throw Timeout("memory store: key '" + key + "' was not set within " + ms_text(timeout));
  }
  return values_.at(key).value;
}

std::int64_t MemoryStore::add(const std::string& key, std::int64_t delta) {
  std::lock_guard lock(mutex_);
  expire_leases();
  auto& value = values_[key].value;
  std::int64_t current = 0;
  if (!value.empty()) {
    const auto* end = value.data() + value.size();
    const auto [ptr, ec] = std::from_chars(value.data(), end, current);
    if (ec != std::errc() || ptr != end) {
      throw InvalidArgument("memory store: add on key '" + key + "' whose value '" + value +
                            "' is not an integer");
    }
  }
  const std::int64_t result = current + delta;
  value = std::to_string(result);
  changed_.notify_all();
  return result;
}

std::string MemoryStore::compare_set(const std::string& key, const std::string& expected,
                                     const std::string& desired) {
  std::lock_guard lock(mutex_);
  expire_leases();
  const auto it = values_.find(key);
  const bool matches = it == values_.end() ? expected.empty() : it->second.value == expected;
  if (!matches) return it == values_.end() ? std::string() : it->second.value;
  values_[key].value = desired;
  changed_.notify_all();
  return desired;
}

void MemoryStore::wait(const std::vector<std::string>& keys, Duration timeout) {
  std::unique_lock lock(mutex_);
  const auto all_present = [&] {
    return std::all_of(keys.begin(), keys.end(),
                       [&](const std::string& key) { return values_.contains(key); });
  };
  if (wait_until(lock, timeout, all_present)) return;
  std::string missing;
  for (const auto& key : keys) {
    if (values_.contains(key)) continue;
    missing += (missing.empty() ? "'" : ", '") + key + "'";
  }
  throw Timeout("memory store: key(s) " + missing + " not set within " + ms_text(timeout));
}

std::optional<std::string> MemoryStore::wait_for_change(const std::string& key,
                                                        const std::optional<std::string>& known,
                                                        Duration timeout) {
  std::unique_lock lock(mutex_);
  const auto current = [&]() -> std::optional<std::string> {
    const auto it = values_.find(key);
    if (it == values_.end()) return std::nullopt;
    return it->second.value;
  };
  if (!wait_until(lock, timeout, [&] { return current() != known; })) {
    throw Timeout("memory store: key '" + key + "' did not change within " + ms_text(timeout));
  }
  return current();
}

std::vector<std::pair<std::string, std::string>> MemoryStore::list(const std::string& prefix) {
  std::lock_guard lock(mutex_);
  expire_leases();
  std::vector<std::pair<std::string, std::string>> found;
  for (auto it = values_.lower_bound(prefix); it != values_.end() && it->first.starts_with(prefix);
       ++it)
    found.emplace_back(it->first, it->second.value);
  return found;
}

bool MemoryStore::check(const std::string& key) {
  std::lock_guard lock(mutex_);
  expire_leases();
  return values_.contains(key);
}

bool MemoryStore::remove(const std::string& key) {
  std::lock_guard lock(mutex_);
  expire_leases();
  const auto it = values_.find(key);
  if (it == values_.end()) return false;
  erase(it);
  changed_.notify_all();
  return true;
}

LeaseId MemoryStore::grant_lease(Duration ttl) {
  if (ttl < Duration(1) || ttl > kMaxStoreDuration)
    throw InvalidArgument("memory store: a lease of " + ms_text(ttl) +
                          "; a lease lasts between 1 ms and 30 days");
  std::lock_guard lock(mutex_);
  expire_leases();
  const auto id = LeaseId{++next_lease_};
  leases_[id] = Lease{ttl, Clock::now() + ttl, {}};
  return id;
}

void MemoryStore::keep_alive(LeaseId lease) {
  std::lock_guard lock(mutex_);
  expire_leases();
  const auto it = leases_.find(lease);
  if (it == leases_.end()) throw expired("keep_alive", lease);
  it->second.deadline = Clock::now() + it->second.ttl;
}

void MemoryStore::revoke_lease(LeaseId lease) {
  std::lock_guard lock(mutex_);
  expire_leases();
  const auto it = leases_.find(lease);
  if (it == leases_.end()) return;
  end_lease(it);
}

LeaseExpired MemoryStore::expired(const std::string& what, LeaseId lease) {
  return LeaseExpired("memory store: " + what + " under lease " +
                          std::to_string(static_cast<std::int64_t>(lease)) +
                          ", which has expired or was revoked: its keys are gone; take a new "
                          "lease and join again",
                      lease);
}

// The entry of key, created if absent, bound to `lease` (unbound for LeaseId{}).
MemoryStore::Entry& MemoryStore::bind(const std::string& key, LeaseId lease) {
  auto& entry = values_[key];
  if (entry.lease == lease) return entry;
  if (const auto old = leases_.find(entry.lease); old != leases_.end()) old->second.keys.erase(key);
  if (const auto next = leases_.find(lease); next != leases_.end()) next->second.keys.insert(key);
  entry.lease = lease;
  return entry;
}

void MemoryStore::erase(std::map<std::string, Entry>::iterator it) {
  if (const auto lease = leases_.find(it->second.lease); lease != leases_.end())
    lease->second.keys.erase(it->first);
  values_.erase(it);
}

void MemoryStore::end_lease(std::map<LeaseId, Lease>::iterator it) {
  for (const auto& key : it->second.keys) values_.erase(key);
  leases_.erase(it);
  changed_.notify_all();
}

void MemoryStore::expire_leases() {
  const auto now = Clock::now();
  for (auto it = leases_.begin(); it != leases_.end();) {
    const auto next = std::next(it);
    if (it->second.deadline <= now) end_lease(it);
    it = next;
  }
}

MemoryStore::Clock::time_point MemoryStore::next_lease_deadline() const {
  auto next = Clock::time_point::max();
  for (const auto& [id, lease] : leases_) next = std::min(next, lease.deadline);
  return next;
}

MemoryStore::MemoryStore(const Options& /*options: none*/) : MemoryStore() {}

std::shared_ptr<Store> make_memory_store() {
  return std::make_shared<MemoryStore>();
}

}  // namespace tessera::memory
