#pragma once
// Whether a pointer really is memory of the CUDA device a view says it is on.

#include <string>

#include "tessera/base/dtype.hpp"

namespace tessera::cuda {

// Throws InvalidArgument, naming `what` and both places, unless `pointer` lies in memory that
// kernels on `device` may touch as that device's own: an allocation on it (cudaMalloc,
// cudaMallocAsync) or managed memory. A view that claims cuda:N over host memory is a caller's
// bug that a kernel would turn into a fault far from its cause (or, with HMM, into a silent
// write through the bus), so the compute plugins check the views a strategy hands them.
void require_memory_on(Device device, const void* pointer, const std::string& what);

}  // namespace tessera::cuda
