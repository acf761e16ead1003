#pragma once
// A communicator whose buffers live on a device, seen by the suite through host buffers: every
// operation copies its inputs to device memory from the transport's own allocator, runs there,
// and copies the results back when its Work is waited for. So the one suite, written over host
// memory, drives a device transport (nccl) through its real operations on device buffers.

#include <memory>

#include "tessera/base/device_allocator.hpp"
#include "tessera/plugin/communicator.hpp"

namespace tessera::conformance {

// `inner` moves buffers on `allocator`'s device only.
[[nodiscard]] std::shared_ptr<Communicator> staged_on_device(
    std::shared_ptr<Communicator> inner, std::shared_ptr<DeviceAllocator> allocator);

}  // namespace tessera::conformance
