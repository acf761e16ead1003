#include "transport.hpp"

#include <cstring>
#include <string>

#include "communicator.hpp"
#include "cuda/cuda_allocator.hpp"
#include "cuda/cuda_device.hpp"
#include "nccl_comm.hpp"
#include "tessera/base/error.hpp"
#include "tessera/transport_kit/launch_env.hpp"

namespace tessera::nccl {

namespace {
constexpr const char* kConnectCounter = "tessera.nccl/connects";
}  // namespace

NcclTransport::NcclTransport(const Options& options) {
  settings_.timeout = options.get_duration("timeout");
  settings_.poll_interval = options.get_duration("poll_interval");
  TESSERA_CHECK(settings_.timeout.count() > 0, "[transport.nccl] timeout must be positive");
  TESSERA_CHECK(settings_.poll_interval.count() > 0,
                "[transport.nccl] poll_interval must be positive");
}

std::shared_ptr<DeviceAllocator> NcclTransport::allocator(Device device) const {
  if (device == Device::cpu()) return cpu_allocator();
  cuda::require(device, "the nccl transport");
  return cuda::allocator_for(device.index);
}

int device_of_rank(int rank) {
  const LaunchInfo info = launch_info_from_environment();
  return info.source == "none" ? rank : info.local_rank;
}

std::unique_ptr<Communicator> NcclTransport::do_connect(std::shared_ptr<Store> store, int rank,
                                                        int size, Duration timeout) {
  TESSERA_CHECK(size > 0, "nccl: world size must be positive");
  TESSERA_CHECK(rank >= 0 && rank < size, "nccl: rank " + std::to_string(rank) +
                                              " is outside [0, " + std::to_string(size) + ")");
  const int ordinal = device_of_rank(rank);
  cuda::require(Device::cuda(ordinal), "the nccl transport (rank " + std::to_string(rank) + ")");
  const Deadline deadline = deadline_after(timeout);

  // The k-th world connected through one store meets under generation k, as in every transport.
  const std::int64_t ticket = store->add(kConnectCounter, 1);
  const std::string key = "tessera.nccl/" + std::to_string((ticket - 1) / size) + "/unique_id";
  ncclUniqueId id{};
  if (rank == 0) {
    id = make_unique_id();
    store->set(key, std::string(reinterpret_cast<const char*>(&id), sizeof id));
  } else {
    std::string bytes;
    try {
      bytes = store->get(key, timeout);
    } catch (const Timeout&) {
      throw Timeout("nccl: connect of rank " + std::to_string(rank) + " of " +
                    std::to_string(size) + " timed out after " + std::to_string(timeout.count()) +
                    " ms: rank 0 never published the NCCL unique id; is rank 0 running?");
    }
    if (bytes.size() != sizeof id) {
      throw TransportError("nccl: the NCCL unique id in the store under '" + key + "' has " +
                               std::to_string(bytes.size()) + " bytes, not " +
                               std::to_string(sizeof id) +
                               "; ranks of different NCCL builds, or another job on this store",
                           0, "connect");
    }
    std::memcpy(&id, bytes.data(), sizeof id);
  }
  // Each rank says it came, so that a connect that times out can name the ranks that did not.
  const std::string arrived = "tessera.nccl/" + std::to_string((ticket - 1) / size) + "/arrived/";
  store->set(arrived + std::to_string(rank), "1");
  try {
    auto comm =
        NcclComm::create(id, rank, size, ordinal, settings_.poll_interval, timeout, deadline);
    return std::make_unique<NcclCommunicator>(std::move(comm), settings_);
  } catch (const Timeout& e) {
    std::string missing;
    for (int r = 0; r < size; ++r) {
      if (!store->check(arrived + std::to_string(r))) {
        missing += (missing.empty() ? "" : ", ") + std::to_string(r);
      }
    }
    if (missing.empty()) throw;
    throw Timeout(std::string(e.what()) + "; rank(s) never arrived: " + missing);
  }
}

}  // namespace tessera::nccl
