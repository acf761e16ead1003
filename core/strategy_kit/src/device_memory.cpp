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
                          ": on a GPU ([runtime] device = cuda) train with ddp, zero1, zero2 "
                          "or zero3, or keep device = cpu for " +
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

Tensor host_copy(const Tensor& tensor) {
  return tensor.device() == Device::cpu() ? tensor.alias() : tensor.copy_to(cpu_allocator());
}

void copy_back(const Tensor& host, const Tensor& tensor) {
  if (host.view().data == tensor.view().data) return;
  TESSERA_CHECK(host.bytes() == tensor.bytes(), "copy_back: the host copy has another size");
  tensor.allocator()->copy(tensor.view(), host.view());
}

Tensor placed_in(const std::shared_ptr<DeviceAllocator>& memory, const Tensor& tensor) {
  if (memory == nullptr || memory->device() == Device::cpu() || tensor.count() == 0 ||
      tensor.device() == memory->device()) {
    return tensor.alias();
  }
  return tensor.copy_to(memory);
}

}  // namespace tessera
