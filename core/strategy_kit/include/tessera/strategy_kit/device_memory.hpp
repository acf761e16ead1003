#pragma once
// Where a strategy's parameters, gradients and optimizer state live: the allocator of
// StrategySetup, checked once at setup() against what the communicator and the optimizer can
// reach, so that a misplaced buffer is refused by name before any memory is taken.

#include <memory>
#include <string_view>

#include "tessera/base/device_allocator.hpp"
#include "tessera/plugin/strategy.hpp"

namespace tessera {

// setup.allocator, or cpu_allocator() when it is null. Throws InvalidArgument, naming
// `strategy` and the device, when setup.world cannot move buffers on the allocator's device
// (Communicator::moves) or setup.optimizer cannot update them there (Optimizer::runs_on).
// setup.world and setup.optimizer must be set.
[[nodiscard]] std::shared_ptr<DeviceAllocator> strategy_allocator(const StrategySetup& setup,
                                                                  std::string_view strategy);

// strategy_allocator() for a strategy that computes on the host only: also throws
// InvalidArgument, naming `strategy`, for an allocator of any other device.
[[nodiscard]] std::shared_ptr<DeviceAllocator> host_strategy_allocator(const StrategySetup& setup,
                                                                       std::string_view strategy);

// Sets every byte of `view` (host memory, or memory of `memory`'s device) to zero. On a device,
// through copies from a zeroed host buffer (DeviceAllocator has no fill of its own).
void fill_zero(DeviceAllocator& memory, BufferView view);

// `tensor`'s values where the host reads them: an alias of `tensor` when it is in host memory,
// else a copy (blocking). Host code then runs unchanged over either; a copy's changes reach
// `tensor` through copy_back().
[[nodiscard]] Tensor host_copy(const Tensor& tensor);

// After `host = host_copy(tensor)` and changes to `host`: writes them into `tensor` when `host`
// is a copy, nothing when it is an alias.
void copy_back(const Tensor& host, const Tensor& tensor);

// `tensor` in the memory `memory` hands out: an alias when that is the host, else a copy (a
// batch going to the GPU a strategy computes on).
[[nodiscard]] Tensor placed_in(const std::shared_ptr<DeviceAllocator>& memory,
                               const Tensor& tensor);

}  // namespace tessera
