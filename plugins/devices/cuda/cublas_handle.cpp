#include "cuda/cublas_handle.hpp"

#include <dlfcn.h>

#include <map>
#include <mutex>
#include <optional>
#include <vector>

#include "cuda/cuda_device.hpp"
#include "tessera/base/error.hpp"

namespace tessera::cuda {
namespace {

// Where cuBLAS is looked for, in order (CMake defines both: the toolkit's soname, and the file
// it linked against before cuBLAS was loaded at run time).
std::vector<std::string> cublas_candidates() {
  return {TESSERA_CUBLAS_SONAME, TESSERA_CUBLAS_FILE};
}

template <class Function>
void resolve(void* library, const char* symbol, Function& into, const std::string& file) {
  dlerror();
  void* found = dlsym(library, symbol);
  if (found == nullptr) {
    const char* why = dlerror();
    throw Error(file + " has no " + symbol + " (" + (why != nullptr ? why : "null symbol") +
                "): it is not the cuBLAS of the CUDA toolkit tessera was built with; put that "
                "one first on LD_LIBRARY_PATH");
  }
  into = reinterpret_cast<Function>(found);
}

CublasApi load_cublas() {
  std::string reasons;
  for (const std::string& file : cublas_candidates()) {
    // RTLD_NODELETE: the table outlives any dlclose (there is none); RTLD_LOCAL keeps cuBLAS's
    // symbols out of the process's global scope.
    void* library = dlopen(file.c_str(), RTLD_NOW | RTLD_LOCAL | RTLD_NODELETE);
    if (library == nullptr) {
      const char* why = dlerror();
      reasons += "; " + file + ": " + (why != nullptr ? why : "not found");
      continue;
    }
    CublasApi api;
    resolve(library, "cublasCreate_v2", api.create, file);
    resolve(library, "cublasDestroy_v2", api.destroy, file);
    resolve(library, "cublasSetStream_v2", api.set_stream, file);
    resolve(library, "cublasSetMathMode", api.set_math_mode, file);
    resolve(library, "cublasSetPointerMode_v2", api.set_pointer_mode, file);
    resolve(library, "cublasGetStatusName", api.status_name, file);
    resolve(library, "cublasGetStatusString", api.status_string, file);
    resolve(library, "cublasSgemm_v2", api.sgemm, file);
    return api;
  }
  throw Error("the layers on a GPU need cuBLAS, which could not be loaded" + reasons +
              "; install the CUDA toolkit's cuBLAS (libcublas and libcublasLt) or put its folder "
              "on LD_LIBRARY_PATH");
}

}  // namespace

const CublasApi& cublas() {
  static std::mutex mutex;
  static std::optional<CublasApi> loaded;
  const std::lock_guard lock(mutex);
  if (!loaded) loaded = load_cublas();
  return *loaded;
}

bool cublas_loaded() noexcept {
  for (const std::string& file : cublas_candidates()) {
    // RTLD_NOLOAD: only asks whether it is there; the reference it takes is given back.
    void* library = dlopen(file.c_str(), RTLD_NOW | RTLD_NOLOAD);
    if (library != nullptr) {
      dlclose(library);
      return true;
    }
  }
  return false;
}

void check(cublasStatus_t status, const std::string& what) {
  if (status == CUBLAS_STATUS_SUCCESS) return;
  const CublasApi& api = cublas();
  const std::string said = std::string(api.status_name(status)) + ": " + api.status_string(status);
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
  const CublasApi& api = cublas();
  check(api.create(&handle), "creating the cuBLAS handle of " + where);
  try {
    check(api.set_stream(handle, nullptr),
          "putting " + where + "'s cuBLAS handle on the default stream");
    check(api.set_math_mode(handle, CUBLAS_DEFAULT_MATH),
          "setting " + where + "'s cuBLAS math mode");
    check(api.set_pointer_mode(handle, CUBLAS_POINTER_MODE_HOST),
          "setting " + where + "'s cuBLAS pointer mode");
  } catch (...) {
    (void)api.destroy(handle);
    throw;
  }
  handles->emplace(ordinal, handle);
  return handle;
}

}  // namespace tessera::cuda
