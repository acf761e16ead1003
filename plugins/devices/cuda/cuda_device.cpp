#include "cuda/cuda_device.hpp"

#include <cuda_runtime_api.h>

#include "cuda/cuda_error.hpp"
#include "tessera/base/error.hpp"

namespace tessera::cuda {

namespace {

// cudaGetDeviceCount's answer, and its error when it has none.
struct Census {
  int count = 0;
  cudaError_t status = cudaSuccess;
};

Census census() noexcept {
  Census out;
  out.status = cudaGetDeviceCount(&out.count);
  if (out.status != cudaSuccess) {
    (void)cudaGetLastError();
    out.count = 0;
  }
  return out;
}

}  // namespace

int device_count() noexcept {
  return census().count;
}

void require(Device device, const std::string& who) {
  if (device.type != DeviceType::cuda) {
    throw InvalidArgument(who + " needs a CUDA device, not " + to_string(device));
  }
  const Census seen = census();
  if (seen.status != cudaSuccess) {
    throw Error(who + " needs a CUDA device, and the CUDA runtime finds none (" +
                cudaGetErrorName(seen.status) + ": " + cudaGetErrorString(seen.status) +
                "); run on a machine with an NVIDIA GPU and its driver, or choose a CPU "
                "transport (shm, ucx, local)");
  }
  if (seen.count == 0) {
    throw Error(who +
                " needs a CUDA device, and this machine has none; run on a machine with an "
                "NVIDIA GPU, or choose a CPU transport (shm, ucx, local)");
  }
  if (device.index < 0 || device.index >= seen.count) {
    throw Error(who + " needs a CUDA device, and " + to_string(device) +
                " does not exist: this machine has " + std::to_string(seen.count) +
                " (cuda:0 to cuda:" + std::to_string(seen.count - 1) +
                "); start at most that many ranks per host, one GPU each");
  }
}

DeviceGuard::DeviceGuard(int ordinal) {
  check(cudaGetDevice(&previous_), "cudaGetDevice");
  if (previous_ != ordinal) {
    check(cudaSetDevice(ordinal), "cudaSetDevice(" + std::to_string(ordinal) + ")");
    changed_ = true;
  }
}

DeviceGuard::~DeviceGuard() {
  if (changed_) (void)cudaSetDevice(previous_);
}

}  // namespace tessera::cuda
