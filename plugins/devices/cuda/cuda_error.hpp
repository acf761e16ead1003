#pragma once
// Errors of the CUDA runtime as tessera errors: what failed, the runtime's own words, and what
// to do about it.

#include <cuda_runtime_api.h>

#include <string>

namespace tessera::cuda {

// Throws for status != cudaSuccess: OutOfMemory for cudaErrorMemoryAllocation, Error otherwise.
// `what` says what was being done, on which device ("cudaMalloc of 4096 bytes on cuda:0").
void check(cudaError_t status, const std::string& what);

}  // namespace tessera::cuda
