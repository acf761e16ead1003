#pragma once
// The cuBLAS handle of one CUDA device, cuBLAS errors as tessera errors, and cuBLAS itself,
// loaded when a GPU first computes rather than linked.

#include <cublas_v2.h>

#include <string>

namespace tessera::cuda {

// The cuBLAS entry points tessera calls, resolved from the cuBLAS library (dlopen, then dlsym of
// each) on first use instead of linked into the plugins that compute: libcublas needs
// libcublasLt, whose loading alone costs a process about 150 MiB of resident memory (its
// initialisers write an 84 MiB .bss and read much of its text), which every rank of a host-only
// gpt or mlp run paid at plugin discovery, GPU or not.
struct CublasApi {
  decltype(&cublasCreate_v2) create = nullptr;
  decltype(&cublasDestroy_v2) destroy = nullptr;
  decltype(&cublasSetStream_v2) set_stream = nullptr;
  decltype(&cublasSetMathMode) set_math_mode = nullptr;
  decltype(&cublasSetPointerMode_v2) set_pointer_mode = nullptr;
  decltype(&cublasGetStatusName) status_name = nullptr;
  decltype(&cublasGetStatusString) status_string = nullptr;
  decltype(&cublasSgemm_v2) sgemm = nullptr;
};

// Loads cuBLAS on the first call (thread-safe; later calls return the same table, never
// unloaded): the toolkit's soname through the caller's search path (RUNPATH, LD_LIBRARY_PATH),
// then the file the build found. Throws Error naming the library, dlerror's reason and what to
// do when it cannot be loaded or lacks an entry point, again on every later call.
[[nodiscard]] const CublasApi& cublas();

// Whether this process has cuBLAS loaded (by cublas() or by anything else): what host-only runs
// and their tests check is false.
[[nodiscard]] bool cublas_loaded() noexcept;

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
