#pragma once
// Collectives over a few values the host holds (a loss, sample counts, a schedule's length)
// through any communicator. A CPU transport moves them where they are; a device transport
// (nccl) moves device memory only, so they travel through a small buffer in `memory`, the
// allocator of the device it moves. Each call returns once the result is in the host values.

#include "tessera/base/buffer_view.hpp"
#include "tessera/base/device_allocator.hpp"
#include "tessera/plugin/communicator.hpp"

namespace tessera {

// `values` and `out` are host views. `memory` may be null, or the host's, for a communicator
// that moves host memory; otherwise it must be the allocator of a device the communicator
// moves (InvalidArgument otherwise, naming both). Throws like the operations' Work::wait.
void all_reduce_host(Communicator& world, DeviceAllocator* memory, BufferView values, ReduceOp op);
void broadcast_host(Communicator& world, DeviceAllocator* memory, BufferView values, int root);
void all_gather_host(Communicator& world, DeviceAllocator* memory, BufferView values,
                     BufferView out);

}  // namespace tessera
