#include "fail_fast_store.hpp"

#include <type_traits>
#include <utility>

#include "tessera/base/error.hpp"

namespace tessera::elastic {

FailFastStore::FailFastStore(std::shared_ptr<Store> inner, Duration lease_ttl)
    : inner_(std::move(inner)), lease_ttl_(lease_ttl), last_answer_(Clock::now()) {
  TESSERA_CHECK(inner_ != nullptr, "FailFastStore: no store");
}

std::optional<Duration> FailFastStore::given_up_after() const {
  const std::lock_guard lock(mutex_);
  return given_up_after_;
}

template <class Request>
auto FailFastStore::ask(Request&& request) -> decltype(request(std::declval<Store&>())) {
  {
    const std::lock_guard lock(mutex_);
    if (given_up_) throw Error(*given_up_);
  }
  try {
    if constexpr (std::is_void_v<decltype(request(*inner_))>) {
      request(*inner_);
      answered();
    } else {
      auto result = request(*inner_);
      answered();
      return result;
    }
  } catch (const Timeout&) {
    throw;  // a wait that ended: the store may or may not have answered meanwhile
  } catch (const LeaseExpired&) {
    answered();
    throw;
  } catch (const InvalidArgument&) {
    answered();
    throw;
  } catch (const Error& e) {
    failed(e);
    throw;
  }
}

void FailFastStore::answered() {
  const std::lock_guard lock(mutex_);
  last_answer_ = Clock::now();
}

void FailFastStore::failed(const std::exception& failure) {
  const std::lock_guard lock(mutex_);
  if (given_up_) return;
  const auto silence = std::chrono::duration_cast<Duration>(Clock::now() - last_answer_);
  // A shorter outage may still be ridden out: the leases are alive, and the next request tries
  // the store again.
  if (silence < lease_ttl_) return;
  given_up_after_ = silence;
  given_up_ =
      "the job's store gave no answer for " + std::to_string(silence.count()) +
      " ms, longer than a worker's lease (failure_timeout = " + std::to_string(lease_ttl_.count()) +
      " ms), so every lease in it has ended; this worker asks it nothing more (" + failure.what() +
      ")";
}

void FailFastStore::set(const std::string& key, const std::string& value) {
  ask([&](Store& s) { s.set(key, value); });
}

void FailFastStore::set(const std::string& key, const std::string& value, LeaseId lease) {
  ask([&](Store& s) { s.set(key, value, lease); });
}

std::string FailFastStore::get(const std::string& key, Duration timeout) {
  return ask([&](Store& s) { return s.get(key, timeout); });
}

std::int64_t FailFastStore::add(const std::string& key, std::int64_t delta) {
  return ask([&](Store& s) { return s.add(key, delta); });
}

std::string FailFastStore::compare_set(const std::string& key, const std::string& expected,
                                       const std::string& desired) {
  return ask([&](Store& s) { return s.compare_set(key, expected, desired); });
}

void FailFastStore::wait(const std::vector<std::string>& keys, Duration timeout) {
  ask([&](Store& s) { s.wait(keys, timeout); });
}

std::optional<std::string> FailFastStore::wait_for_change(const std::string& key,
                                                          const std::optional<std::string>& known,
                                                          Duration timeout) {
  return ask([&](Store& s) { return s.wait_for_change(key, known, timeout); });
}

std::vector<std::pair<std::string, std::string>> FailFastStore::list(const std::string& prefix) {
  return ask([&](Store& s) { return s.list(prefix); });
}

bool FailFastStore::check(const std::string& key) {
  return ask([&](Store& s) { return s.check(key); });
}

bool FailFastStore::remove(const std::string& key) {
  return ask([&](Store& s) { return s.remove(key); });
}

LeaseId FailFastStore::grant_lease(Duration ttl) {
  return ask([&](Store& s) { return s.grant_lease(ttl); });
}

void FailFastStore::keep_alive(LeaseId lease) {
  ask([&](Store& s) { s.keep_alive(lease); });
}

void FailFastStore::revoke_lease(LeaseId lease) {
  ask([&](Store& s) { s.revoke_lease(lease); });
}

}  // namespace tessera::elastic
