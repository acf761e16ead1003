#pragma once
// DeviceMemorySource: how a host gets memory on a device from the transport that moves it.
// The core never includes a GPU runtime's headers, so the allocator of a GPU's memory comes
// from the plugin that speaks that runtime: a transport whose descriptor lists a device
// (TESSERA_DEVICE_CUDA) derives from this class as well as from Transport.

#include <memory>
#include <optional>

#include "tessera/base/device_allocator.hpp"
#include "tessera/base/dtype.hpp"

namespace tessera {

class Communicator;
class Transport;

// Its type information lives in libtessera (the out-of-line destructor), so a host's
// dynamic_cast finds it in a plugin built with hidden visibility.
class __attribute__((visibility("default"))) DeviceMemorySource {
 public:
  virtual ~DeviceMemorySource();
  // The allocator of memory on `device` that this transport's communicators move. Throws
  // InvalidArgument for a device it does not serve, Error when the device is not there (no GPU).
  [[nodiscard]] virtual std::shared_ptr<DeviceAllocator> allocator(Device device) const = 0;
};

// The allocator of `device` for buffers `transport` moves: the host's for cpu, the transport's
// own (DeviceMemorySource) for any other device. Throws InvalidArgument naming the device when
// the transport has no memory there (every CPU transport, for cuda:N).
[[nodiscard]] std::shared_ptr<DeviceAllocator> memory_for(const Transport& transport,
                                                          Device device);

// The first GPU whose memory `world` moves (cuda:0 to cuda:63), nullopt for none: where a rank of
// a device transport keeps its buffers.
[[nodiscard]] std::optional<Device> gpu_moved_by(const Communicator& world);

}  // namespace tessera
