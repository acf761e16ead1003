#pragma once
// The threads one rank's layers compute with: a oneTBB arena of `threads` workers for the
// element-wise kernels (OpenBLAS keeps its own pool, see set_blas_threads), and the host
// allocator the layers take their large per-step buffers from.

#include <tbb/blocked_range.h>
#include <tbb/parallel_for.h>
#include <tbb/task_arena.h>

#include <cstddef>
#include <memory>

#include "tessera/base/device_allocator.hpp"

namespace tessera::layers {

// The instruction set a kernel's loops are compiled for. The layers' sources are built for
// baseline x86-64 (SSE2: 4 floats a vector), so that one binary runs on any x86-64 CPU;
// parallel_for also compiles each body for AVX2 (8 floats) and runs that copy where the CPU has
// it. Neither copy may use FMA or reassociate (no -ffast-math, -ffp-contract=off: the
// CMakeLists), so both compute the same bits; only the speed differs.
enum class VectorIsa {
  baseline,  // what the compiler targets (x86-64: SSE2)
  avx2,      // x86-64 with AVX2, chosen at run time
};

// The widest VectorIsa this CPU runs: avx2 where the CPU (and the OS, for the 256-bit
// registers) supports it, baseline otherwise and on other architectures.
[[nodiscard]] VectorIsa widest_vector_isa() noexcept;

// "baseline" or "avx2".
[[nodiscard]] const char* vector_isa_name(VectorIsa isa) noexcept;

namespace detail {

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
inline constexpr bool kHasAvx2Copies = true;
// body(begin, end) compiled for AVX2: the body's call operator (and whatever it inlines) is
// inlined here, where the target allows 256-bit vectors. A kernel marks its body and the
// helpers of its loops always_inline (TESSERA_KERNEL_INLINE) so that this copy is not just a
// call to the baseline one.
template <class Body>
__attribute__((target("avx2"))) void call_with_avx2(const Body& body, std::size_t begin,
                                                    std::size_t end) {
  body(begin, end);
}
#else
inline constexpr bool kHasAvx2Copies = false;
#endif

}  // namespace detail

// On a kernel's parallel_for body or the helpers its loops call: inlined into each
// instruction-set copy (see VectorIsa), so that every copy vectorises for its own target.
#if defined(__GNUC__) || defined(__clang__)
#define TESSERA_KERNEL_INLINE __attribute__((always_inline))
#else
#define TESSERA_KERNEL_INLINE
#endif

// Below this many elements a kernel runs on the calling thread: spawning tasks would cost more
// than the work.
inline constexpr std::size_t kParallelGrain = 16384;

// Shared by the layers of one model. parallel_for is thread-safe, so layers stay const and
// several micro-batches may compute at once.
class ComputeContext {
 public:
  // threads >= 1; throws InvalidArgument otherwise, and where `isa` is wider than this CPU
  // runs (widest_vector_isa()). Tests pass VectorIsa::baseline to compare the copies.
  explicit ComputeContext(int threads, VectorIsa isa = widest_vector_isa());
  ComputeContext(const ComputeContext&) = delete;
  ComputeContext& operator=(const ComputeContext&) = delete;

  [[nodiscard]] int threads() const noexcept { return threads_; }
  // The copy of every parallel_for body that runs.
  [[nodiscard]] VectorIsa vector_isa() const noexcept { return isa_; }

  // Host memory for buffers allocated afresh every step and large enough that fresh pages
  // would cost more than the work on them (a GPT's logits and their gradient): a
  // RecyclingHostAllocator, so the next step reuses the blocks. Thread-safe.
  [[nodiscard]] const std::shared_ptr<DeviceAllocator>& large_buffers() const noexcept {
    return large_buffers_;
  }

  // Calls body(begin, end) over disjoint ranges covering [0, n), in parallel inside the arena
  // when there is enough work. The split varies from run to run, so body must write only its
  // own range and never combine results across ranges.
  template <class Body>
  void parallel_for(std::size_t n, std::size_t grain, const Body& body) const {
    if (threads_ == 1 || n < 2 * grain) {
      call(body, 0, n);
      return;
    }
    arena_.execute([&] {
      tbb::parallel_for(
          tbb::blocked_range<std::size_t>(0, n, grain),
          [&](const tbb::blocked_range<std::size_t>& r) { call(body, r.begin(), r.end()); });
    });
  }

 private:
  template <class Body>
  void call(const Body& body, std::size_t begin, std::size_t end) const {
    if constexpr (detail::kHasAvx2Copies) {
      if (isa_ == VectorIsa::avx2) {
        detail::call_with_avx2(body, begin, end);
        return;
      }
    }
    body(begin, end);
  }

  int threads_;
  VectorIsa isa_;
  mutable tbb::task_arena arena_;
  std::shared_ptr<DeviceAllocator> large_buffers_;
};

// Sets OpenBLAS's thread pool size. Process-wide (OpenBLAS has one pool), so ranks running as
// threads of one process share the last value set.
void set_blas_threads(int threads);

}  // namespace tessera::layers
