#pragma once
// The cuBLAS handle of one CUDA device, and cuBLAS errors as tessera errors.

#include <cublas_v2.h>

#include <string>

namespace tessera::cuda {

// The one cuBLAS handle of cuda:`ordinal` in this process, created on first use with that
// device current. It computes on the legacy default stream (the ordering contract of the
// allocator and the transports), with host scalars and CUBLAS_DEFAULT_MATH: fp32 GEMMs stay
// fp32 (no TF32), and cuBLAS's results are bitwise reproducible on one stream. Its settings never
// change after creation, so threads may share it (cuBLAS allows that; the GEMMs of two threads
// are ordered on the one stream, which also keeps its workspace private to one GEMM at a time).
// Use it with `ordinal` current (DeviceGuard). Never destroyed: a handle destroyed from a static
// destructor would race the CUDA runtime's own teardown at exit. Throws Error when cuBLAS cannot
// start (OutOfMemory when the device is full).
[[nodiscard]] cublasHandle_t cublas_handle(int ordinal);

// Throws for status != CUBLAS_STATUS_SUCCESS: OutOfMemory for CUBLAS_STATUS_ALLOC_FAILED, Error
// otherwise. `what` says what was being done, on which device.
void check(cublasStatus_t status, const std::string& what);

}  // namespace tessera::cuda
