#include "layers/compute_context.hpp"

#include <cblas.h>

#include <string>

#include "layers/recycling_allocator.hpp"
#include "tessera/base/error.hpp"

namespace tessera::layers {
namespace {

int checked_threads(int threads) {
  TESSERA_CHECK(threads >= 1, "threads must be at least 1, got " + std::to_string(threads));
  return threads;
}

VectorIsa checked_isa(VectorIsa isa) {
  TESSERA_CHECK(isa == VectorIsa::baseline || isa == widest_vector_isa(),
                std::string("ComputeContext: the ") + vector_isa_name(isa) +
                    " kernels were asked for, but this CPU runs only " +
                    vector_isa_name(widest_vector_isa()) + "; ask for VectorIsa::baseline");
  return isa;
}

}  // namespace

VectorIsa widest_vector_isa() noexcept {
#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
  // libgcc's check covers the OS side too (XGETBV: the OS saves the 256-bit registers). The
  // init call makes it valid before static constructors ran (a ComputeContext at namespace scope).
  __builtin_cpu_init();
  if (__builtin_cpu_supports("avx2")) return VectorIsa::avx2;
#endif
  return VectorIsa::baseline;
}

const char* vector_isa_name(VectorIsa isa) noexcept {
  return isa == VectorIsa::avx2 ? "avx2" : "baseline";
}

ComputeContext::ComputeContext(int threads, VectorIsa isa)
    : threads_(checked_threads(threads)),
      isa_(checked_isa(isa)),
      arena_(threads_),
      large_buffers_(std::make_shared<RecyclingHostAllocator>()) {}

void set_blas_threads(int threads) {
  openblas_set_num_threads(checked_threads(threads));
}

}  // namespace tessera::layers
