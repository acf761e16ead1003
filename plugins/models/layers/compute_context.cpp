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

}  // namespace

ComputeContext::ComputeContext(int threads)
    : threads_(checked_threads(threads)),
      arena_(threads_),
      large_buffers_(std::make_shared<RecyclingHostAllocator>()) {}

void set_blas_threads(int threads) {
  openblas_set_num_threads(checked_threads(threads));
}

}  // namespace tessera::layers
