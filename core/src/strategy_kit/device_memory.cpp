#include "tessera/strategy_kit/device_memory.hpp"

#include <algorithm>
#include <cstring>
#include <string>
#include <vector>

#include "tessera/base/error.hpp"

namespace tessera {

std::shared_ptr<DeviceAllocator> strategy_allocator(const StrategySetup& setup,
                                                    std::string_view strategy) {
  TESSERA_CHECK(setup.world && setup.optimizer, "strategy_allocator needs world and optimizer");
  auto allocator = setup.allocator ? setup.allocator : cpu_allocator();
  const Device device = allocator->device();
  const std::string where = to_string(device);
  // Collectives read and write these buffers in place, so a device the transport cannot move
  // would fail at the first bucket; refusing here names the cause instead.
  if (!setup.world->moves(device)) {
    throw InvalidArgument(std::string(strategy) +
                          ": StrategySetup::allocator hands out memory on " + where +
                          ", which the world's transport cannot move; pass an allocator "
                          "of a device the transport moves (cpu_allocator() for every CPU "
                          "transport) or choose a transport that moves " +
                          where);
  }
  if (!setup.optimizer->runs_on(device)) {
    throw InvalidArgument(std::string(strategy) + ": the optimizer cannot update buffers on " +
                          where +
                          " (Optimizer::runs_on); keep the strategy's memory on the "
                          "host (cpu_allocator()) or use an optimizer that runs on " +
                          where);
  }
  return allocator;
}

std::shared_ptr<DeviceAllocator> host_strategy_allocator(const StrategySetup& setup,
                                                         std::string_view strategy) {
  auto allocator = strategy_allocator(setup, strategy);
  if (allocator->device() != Device::cpu()) {
    throw InvalidArgument(std::string(strategy) + " keeps its state in host memory, not on " +
                          to_string(allocator->device()) +
                          ": on a GPU ([runtime] device = cuda) train with ddp, or keep "
                          "device = cpu for " +
                          std::string(strategy));
  }
  return allocator;
}

void fill_zero(DeviceAllocator& memory, BufferView view) {
  if (view.bytes() == 0) return;
  if (view.device == Device::cpu()) {
    std::memset(view.data, 0, view.bytes());
    return;
  }
  constexpr std::size_t kChunk = std::size_t{1} << 20;
  static const std::vector<std::byte> zeros(kChunk);
  for (std::size_t at = 0; at < view.bytes(); at += kChunk) {
    const std::size_t n = std::min(kChunk, view.bytes() - at);
    memory.copy({view.byte_data() + at, n, DType::u8, view.device},
                {const_cast<std::byte*>(zeros.data()), n, DType::u8, Device::cpu()});
  }
}

}  // namespace tessera
