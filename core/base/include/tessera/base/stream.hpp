#pragma once
// Stream: an ordered queue of work on one device (a CUDA stream). Host work has no stream.

#include "tessera/base/dtype.hpp"

namespace tessera {

// `handle` is the device runtime's native stream (cudaStream_t), null for the device's default
// stream. Plain data: whoever created the stream keeps it alive while it is used.
struct Stream {
  Device device;
  void* handle = nullptr;
};

}  // namespace tessera
