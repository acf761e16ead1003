#include "cuda/cuda_error.hpp"

#include "tessera/base/error.hpp"

namespace tessera::cuda {

void check(cudaError_t status, const std::string& what) {
  if (status == cudaSuccess) return;
  // The runtime keeps the last error sticky for the thread; clear it so the next call does not
  // report this one again.
  (void)cudaGetLastError();
  const std::string said =
      std::string(cudaGetErrorName(status)) + ": " + cudaGetErrorString(status);
  if (status == cudaErrorMemoryAllocation) {
    throw OutOfMemory(what + " failed, the device is out of memory (" + said +
                      "); lower the batch size or the model size, or free memory on the GPU");
  }
  throw Error(what + " failed (" + said + ")");
}

}  // namespace tessera::cuda
