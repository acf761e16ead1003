#pragma once
// The DeviceAllocator of one CUDA device.

#include <memory>

#include "tessera/base/device_allocator.hpp"

namespace tessera::cuda {

// Memory from the device's stream-ordered pool (cudaMallocAsync on the legacy default stream,
// which every reference layer and optimizer computes on), so the allocations a training step
// makes and drops cost no device synchronisation. The pool keeps what it was given back (its
// release threshold is raised), as PyTorch's caching allocator does.
//
// Ordering: allocate() and deallocate() are ordered on the default stream. A transport that
// runs on a stream of its own makes that stream wait for the default stream when it starts an
// operation, and a buffer is freed only once the Work that used it was waited for (the
// Communicator's contract), so no kernel ever touches freed memory.
class CudaAllocator final : public DeviceAllocator {
 public:
  // Throws Error when `ordinal` is not a usable device (cuda_device.hpp, require).
  explicit CudaAllocator(int ordinal);

  [[nodiscard]] Device device() const noexcept override { return Device::cuda(ordinal_); }
  [[nodiscard]] void* allocate(std::size_t bytes) override;
  void deallocate(void* pointer, std::size_t bytes) noexcept override;
  // Blocking; host to device, device to host, device to device (this device only).
  void copy(BufferView dst, BufferView src) const override;

 private:
  int ordinal_;
};

// The one allocator of cuda:`ordinal` in this process (created on first use). Throws like
// CudaAllocator's constructor.
[[nodiscard]] std::shared_ptr<DeviceAllocator> allocator_for(int ordinal);

}  // namespace tessera::cuda
