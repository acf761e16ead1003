#include "tessera/plugin/device_memory_source.hpp"

#include "tessera/base/error.hpp"
#include "tessera/plugin/communicator.hpp"
#include "tessera/plugin/transport.hpp"

namespace tessera {

DeviceMemorySource::~DeviceMemorySource() = default;

std::shared_ptr<DeviceAllocator> memory_for(const Transport& transport, Device device) {
  if (device == Device::cpu()) return cpu_allocator();
  const auto* source = dynamic_cast<const DeviceMemorySource*>(&transport);
  if (source == nullptr) {
    throw InvalidArgument("this transport moves host memory only, not " + to_string(device) +
                          "; choose a transport for that device (nccl for cuda) or "
                          "keep the buffers in host memory");
  }
  auto allocator = source->allocator(device);
  TESSERA_CHECK(allocator != nullptr && allocator->device() == device,
                "DeviceMemorySource::allocator returned no allocator of " + to_string(device));
  return allocator;
}

std::optional<Device> gpu_moved_by(const Communicator& world) {
  constexpr int kOrdinals = 64;
  for (int ordinal = 0; ordinal < kOrdinals; ++ordinal) {
    if (world.moves(Device::cuda(ordinal))) return Device::cuda(ordinal);
  }
  return std::nullopt;
}

}  // namespace tessera
