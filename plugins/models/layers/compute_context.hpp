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

// Below this many elements a kernel runs on the calling thread: spawning tasks would cost more
// than the work.
inline constexpr std::size_t kParallelGrain = 16384;

// Shared by the layers of one model. parallel_for is thread-safe, so layers stay const and
// several micro-batches may compute at once.
class ComputeContext {
 public:
  // threads >= 1; throws InvalidArgument otherwise.
  explicit ComputeContext(int threads);
  ComputeContext(const ComputeContext&) = delete;
  ComputeContext& operator=(const ComputeContext&) = delete;

  [[nodiscard]] int threads() const noexcept { return threads_; }

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
      body(std::size_t{0}, n);
      return;
    }
    arena_.execute([&] {
      tbb::parallel_for(
          tbb::blocked_range<std::size_t>(0, n, grain),
          [&](const tbb::blocked_range<std::size_t>& r) { body(r.begin(), r.end()); });
    });
  }

 private:
  int threads_;
  mutable tbb::task_arena arena_;
  std::shared_ptr<DeviceAllocator> large_buffers_;
};

// Sets OpenBLAS's thread pool size. Process-wide (OpenBLAS has one pool), so ranks running as
// threads of one process share the last value set.
void set_blas_threads(int threads);

}  // namespace tessera::layers
