#include "cuda/cuda_allocator.hpp"

#include <cuda_runtime_api.h>

#include <cstdint>
#include <limits>
#include <map>
#include <mutex>
#include <string>

#include "cuda/cuda_device.hpp"
#include "cuda/cuda_error.hpp"
#include "tessera/base/error.hpp"

namespace tessera::cuda {

CudaAllocator::CudaAllocator(int ordinal) : ordinal_(ordinal) {
  require(Device::cuda(ordinal), "the CUDA allocator");
  const DeviceGuard on(ordinal_);
  cudaMemPool_t pool = nullptr;
  check(cudaDeviceGetDefaultMemPool(&pool, ordinal_),
        "cudaDeviceGetDefaultMemPool on cuda:" + std::to_string(ordinal_));
  std::uint64_t keep_everything = std::numeric_limits<std::uint64_t>::max();
  check(cudaMemPoolSetAttribute(pool, cudaMemPoolAttrReleaseThreshold, &keep_everything),
        "raising the release threshold of cuda:" + std::to_string(ordinal_) + "'s memory pool");
}

void* CudaAllocator::allocate(std::size_t bytes) {
  const std::size_t asked = bytes == 0 ? 1 : bytes;
  const DeviceGuard on(ordinal_);
  void* pointer = nullptr;
  const std::string what =
      "allocating " + std::to_string(bytes) + " bytes on cuda:" + std::to_string(ordinal_);
  check(cudaMallocAsync(&pointer, asked, nullptr), what);
  try {
    check(cudaMemsetAsync(pointer, 0, asked, nullptr), "zero-filling " + what);
  } catch (...) {
    (void)cudaFreeAsync(pointer, nullptr);
    throw;
  }
  return pointer;
}

void CudaAllocator::deallocate(void* pointer, std::size_t /*bytes*/) noexcept {
  if (pointer == nullptr) return;
  int previous = -1;
  (void)cudaGetDevice(&previous);
  if (previous != ordinal_) (void)cudaSetDevice(ordinal_);
  (void)cudaFreeAsync(pointer, nullptr);
  if (previous != ordinal_ && previous >= 0) (void)cudaSetDevice(previous);
}

void CudaAllocator::copy(BufferView dst, BufferView src) const {
  const Device mine = device();
  for (const BufferView* view : {&dst, &src}) {
    if (view->device != Device::cpu() && view->device != mine) {
      throw InvalidArgument("the allocator of " + to_string(mine) + " cannot copy from " +
                            to_string(src.device) + " to " + to_string(dst.device) +
                            ": use the allocator of the device the memory lives on");
    }
  }
  if (dst.bytes() != src.bytes()) {
    throw InvalidArgument("copy of " + std::to_string(src.bytes()) + " bytes into " +
                          std::to_string(dst.bytes()));
  }
  if (src.bytes() == 0) return;
  const DeviceGuard on(ordinal_);
  // On the legacy default stream: after every kernel already queued there, and the host waits.
  check(cudaMemcpy(dst.data, src.data, src.bytes(), cudaMemcpyDefault),
        "copying " + std::to_string(src.bytes()) + " bytes from " + to_string(src.device) + " to " +
            to_string(dst.device));
}

std::shared_ptr<DeviceAllocator> allocator_for(int ordinal) {
  static std::mutex mutex;
  static std::map<int, std::shared_ptr<DeviceAllocator>> allocators;
  const std::lock_guard lock(mutex);
  auto& slot = allocators[ordinal];
  if (!slot) slot = std::make_shared<CudaAllocator>(ordinal);
  return slot;
}

}  // namespace tessera::cuda
