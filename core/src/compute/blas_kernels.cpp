#include "tessera/blas_kernels.hpp"

#include <cstdlib>

namespace tessera {

bool prefer_avx512_blas_kernels() noexcept {
  if (std::getenv("OPENBLAS_CORETYPE") != nullptr) return false;
  __builtin_cpu_init();
  const bool avx512 = __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
                      __builtin_cpu_supports("avx512dq") && __builtin_cpu_supports("avx512vl");
  if (!avx512) return false;
  return setenv("OPENBLAS_CORETYPE", "SkylakeX", 0) == 0;
}

}  // namespace tessera
