#include "job_claim.hpp"

#include <unistd.h>

#include "tessera/base/error.hpp"

namespace tessera::launch {

namespace {

// Long enough to ride out a short store outage and a loaded host, short enough that an id a
// killed launcher held is soon free again (docs/launch.md states it).
constexpr Duration kClaimTtl{10000};
constexpr Duration kRenewEvery{2000};

std::string claim_key(int node_rank) {
  return "tessera.launch/running/" + std::to_string(node_rank);
}

std::string this_launcher() {
  char host[256] = {};
  ::gethostname(host, sizeof host - 1);
  return std::string(host) + " pid " + std::to_string(::getpid());
}

}  // namespace

JobClaim::JobClaim(std::shared_ptr<Store> job_store, int node_rank, const std::string& job_id,
                   const std::string& where)
    : store_(std::move(job_store)) {
  const auto me = this_launcher();
  const auto key = claim_key(node_rank);
  lease_ = store_->grant_lease(kClaimTtl);
  // compare_set creates the key unbound; binding it to the lease right after is safe because
  // nobody else writes a key that holds another launcher's name.
  const auto holder = store_->compare_set(key, "", me);
  if (holder != me) {
    try {
      store_->revoke_lease(lease_);
    } catch (const Error&) {  // NOLINT(bugprone-empty-catch): it ends with its ttl anyway
    }
    throw ConfigError("launch: job id '" + job_id + "' is in use on " + where +
                      ": the launcher on " + holder + " runs node " + std::to_string(node_rank) +
                      " of it; give this job another --job-id (or token), or start it once that "
                      "job ended (an id is free again when its launchers exit, or " +
                      std::to_string(kClaimTtl.count() / 1000) +
                      " s after a launcher was killed outright)");
  }
  store_->set(key, me, lease_);
  renewer_ = std::thread([this] { renew(); });
}

JobClaim::~JobClaim() {
  {
    std::lock_guard lock(mutex_);
    stop_ = true;
  }
  wake_.notify_all();
  if (renewer_.joinable()) renewer_.join();
  try {
    store_->revoke_lease(lease_);
  } catch (const std::exception&) {  // NOLINT(bugprone-empty-catch): it ends with its ttl anyway
  }
}

void JobClaim::renew() {
  std::unique_lock lock(mutex_);
  while (!wake_.wait_for(lock, kRenewEvery, [this] { return stop_; })) {
    lock.unlock();
    try {
      store_->keep_alive(lease_);
    } catch (const std::exception&) {  // NOLINT(bugprone-empty-catch): a store that stays away
      // ends the lease; the job itself notices a lost store by its own requests
    }
    lock.lock();
  }
}

}  // namespace tessera::launch
