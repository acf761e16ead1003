#pragma once
// NcclTransport: one rank per GPU. Rank 0 makes the NCCL unique id and publishes it in the
// rendezvous store; every rank creates its communicator from it (non-blocking, so a rank that
// never comes is a Timeout, not a hang).

#include <memory>

#include "tessera/plugin/device_memory_source.hpp"
#include "tessera/plugin/options.hpp"
#include "tessera/plugin/transport.hpp"

namespace tessera::nccl {

struct Settings {
  Duration timeout{};
  Duration poll_interval{};
};

class NcclTransport final : public Transport, public DeviceMemorySource {
 public:
  explicit NcclTransport(const Options& options);

  // cuda:N: the pool allocator of that GPU; cpu: the host's (for staging).
  [[nodiscard]] std::shared_ptr<DeviceAllocator> allocator(Device device) const override;

 protected:
  std::unique_ptr<Communicator> do_connect(std::shared_ptr<Store> store, int rank, int size,
                                           Duration timeout) override;

 private:
  Settings settings_;
};

// The GPU rank `rank` uses: its local rank when a launcher started this process
// (TESSERA_LOCAL_RANK, OMPI_COMM_WORLD_LOCAL_RANK, SLURM_LOCALID), else `rank` (ranks as threads
// of one process, one GPU each).
[[nodiscard]] int device_of_rank(int rank);

}  // namespace tessera::nccl
