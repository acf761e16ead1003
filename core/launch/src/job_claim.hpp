#pragma once
// A launcher's hold on its node of a job in a store that outlives jobs (etcd, a shared folder):
// a key bound to a lease the launcher renews while it runs. A second job given the same id (the
// same --job-id or token) finds the key held and is refused before any worker starts; the id is
// free again as soon as the launcher ends, or one lease ttl after it was killed outright.

#include <condition_variable>
#include <memory>
#include <mutex>
#include <string>
#include <thread>

#include "tessera/plugin/store.hpp"

namespace tessera::launch {

class JobClaim {
 public:
  // Claims node `node_rank` of the job whose namespace `job_store` is. Blocking (a few store
  // requests). Throws ConfigError naming `job_id`, `where` (the store's URL) and the launcher
  // holding it when a live launcher holds that node; a store error passes through. Starts a
  // thread that renews the claim's lease.
  JobClaim(std::shared_ptr<Store> job_store, int node_rank, const std::string& job_id,
           const std::string& where);
  // Stops renewing and revokes the lease: the id is free at once. Never throws.
  ~JobClaim();
  JobClaim(const JobClaim&) = delete;
  JobClaim& operator=(const JobClaim&) = delete;

 private:
  void renew();

  std::shared_ptr<Store> store_;
  LeaseId lease_{};
  std::mutex mutex_;
  std::condition_variable wake_;
  bool stop_ = false;
  std::thread renewer_;
};

}  // namespace tessera::launch
