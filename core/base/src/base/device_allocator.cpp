#include "tessera/base/device_allocator.hpp"

#include <cstdlib>
#include <cstring>
#include <string>

#include "tessera/base/error.hpp"

namespace tessera {

namespace {

OutOfMemory out_of_memory(std::size_t bytes) {
  return OutOfMemory("out of memory on cpu: could not allocate " + std::to_string(bytes) +
                     " bytes; lower the batch size or the model size, or free memory on the host");
}

class CpuAllocator final : public DeviceAllocator {
 public:
  [[nodiscard]] Device device() const noexcept override { return Device::cpu(); }

  [[nodiscard]] void* allocate(std::size_t bytes) override {
    const std::size_t rounded =
        bytes == 0 ? kDeviceAlignment
                   : (bytes + kDeviceAlignment - 1) / kDeviceAlignment * kDeviceAlignment;
    if (rounded < bytes) throw out_of_memory(bytes);
    void* p = std::aligned_alloc(kDeviceAlignment, rounded);
    if (p == nullptr) throw out_of_memory(bytes);
    std::memset(p, 0, rounded);
    return p;
  }

  void deallocate(void* pointer, std::size_t /*bytes*/) noexcept override { std::free(pointer); }

  void copy(BufferView dst, BufferView src) const override {
    if (dst.device != Device::cpu() || src.device != Device::cpu()) {
      throw InvalidArgument("the cpu allocator cannot copy from " + to_string(src.device) + " to " +
                            to_string(dst.device) +
                            ": use the allocator of the device the memory lives on");
    }
    if (dst.bytes() != src.bytes()) {
      throw InvalidArgument("copy of " + std::to_string(src.bytes()) + " bytes into " +
                            std::to_string(dst.bytes()));
    }
    if (src.bytes() > 0) std::memmove(dst.data, src.data, src.bytes());
  }
};

}  // namespace

std::shared_ptr<DeviceAllocator> cpu_allocator() {
  // Stateless, so sharing one instance is not global state.
  static const auto allocator = std::make_shared<CpuAllocator>();
  return allocator;
}

}  // namespace tessera
