#include "cuda/cuda_memory.hpp"

#include <cuda_runtime_api.h>

#include "tessera/base/error.hpp"

namespace tessera::cuda {

void require_memory_on(Device device, const void* pointer, const std::string& what) {
  cudaPointerAttributes attributes{};
  const cudaError_t status = cudaPointerGetAttributes(&attributes, pointer);
  if (status != cudaSuccess) {
    (void)cudaGetLastError();  // not sticky, but keep the next check() from reporting it
    throw InvalidArgument(what + " says " + to_string(device) +
                          ", and the CUDA runtime cannot tell where its memory is (" +
                          cudaGetErrorName(status) + ")");
  }
  if (attributes.type == cudaMemoryTypeManaged) return;
  if (attributes.type == cudaMemoryTypeDevice && attributes.device == device.index) return;
  const std::string actual = attributes.type == cudaMemoryTypeDevice
                                 ? "memory of cuda:" + std::to_string(attributes.device)
                                 : std::string("host memory");
  throw InvalidArgument(what + " says " + to_string(device) + ", but its memory is " + actual +
                        "; allocate it with the allocator of " + to_string(device));
}

}  // namespace tessera::cuda
