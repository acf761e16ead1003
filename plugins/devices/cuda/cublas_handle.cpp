#include "cuda/cublas_handle.hpp"

#include <map>
#include <mutex>

#include "cuda/cuda_device.hpp"
#include "tessera/base/error.hpp"

namespace tessera::cuda {

void check(cublasStatus_t status, const std::string& what) {
  if (status == CUBLAS_STATUS_SUCCESS) return;
  const std::string said =
      std::string(cublasGetStatusName(status)) + ": " + cublasGetStatusString(status);
  if (status == CUBLAS_STATUS_ALLOC_FAILED) {
    throw OutOfMemory(what + " failed, the device is out of memory (" + said +
                      "); lower the batch size or the model size, or free memory on the GPU");
  }
  throw Error(what + " failed (" + said + ")");
}

cublasHandle_t cublas_handle(int ordinal) {
  static std::mutex mutex;
  // Leaked on purpose (see the header): a plain pointer map never runs cublasDestroy at exit.
  static auto* handles = new std::map<int, cublasHandle_t>();
  const std::lock_guard lock(mutex);
  auto found = handles->find(ordinal);
  if (found != handles->end()) return found->second;
  const std::string where = "cuda:" + std::to_string(ordinal);
  const DeviceGuard on(ordinal);
  cublasHandle_t handle = nullptr;
  check(cublasCreate(&handle), "creating the cuBLAS handle of " + where);
  try {
    check(cublasSetStream(handle, nullptr), "putting " + where +
                                                "'s cuBLAS handle on the "
                                                "default stream");
    check(cublasSetMathMode(handle, CUBLAS_DEFAULT_MATH),
          "setting " + where + "'s cuBLAS math mode");
    check(cublasSetPointerMode(handle, CUBLAS_POINTER_MODE_HOST),
          "setting " + where + "'s cuBLAS pointer mode");
  } catch (...) {
    (void)cublasDestroy(handle);
    throw;
  }
  handles->emplace(ordinal, handle);
  return handle;
}

}  // namespace tessera::cuda
