#include "tessera/strategy_kit/device_memory.hpp"

#include <string>

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

}  // namespace tessera
