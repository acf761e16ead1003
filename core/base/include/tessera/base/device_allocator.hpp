#pragma once
// DeviceAllocator: where tensors and strategies get memory on one device. The CPU allocator is
// built in; a GPU transport or runtime plugin provides the allocator of its devices (the nccl
// issue), so the core never includes a GPU runtime's headers.

#include <cstddef>
#include <memory>

#include "tessera/base/buffer_view.hpp"
#include "tessera/base/dtype.hpp"

namespace tessera {

// Every allocation is aligned to at least this many bytes (a cache line on the CPU; GPU
// runtimes align far more), so SIMD loads never straddle two lines.
inline constexpr std::size_t kDeviceAlignment = 64;

// Thread-safety: every method may be called from any thread concurrently.
// Errors: allocate throws OutOfMemory naming the device and the size; copy throws
// InvalidArgument for views on a device this allocator does not serve, or of unequal size.
class DeviceAllocator {
 public:
  virtual ~DeviceAllocator() = default;

  [[nodiscard]] virtual Device device() const noexcept = 0;

  // At least `bytes` bytes (one byte for zero), aligned to kDeviceAlignment and zero-filled;
  // owned by the caller until deallocate(pointer, bytes).
  [[nodiscard]] virtual void* allocate(std::size_t bytes) = 0;
  virtual void deallocate(void* pointer, std::size_t bytes) noexcept = 0;

  // dst = src, byte for byte. Each view is on the host or on this allocator's device; equal
  // byte sizes. Blocking: returns once dst holds the data (a device allocator synchronises).
  virtual void copy(BufferView dst, BufferView src) const = 0;
};

// The allocator of host memory. Stateless: one shared instance serves every runtime.
[[nodiscard]] std::shared_ptr<DeviceAllocator> cpu_allocator();

}  // namespace tessera
