#pragma once
// The threads one rank's layers compute with: a oneTBB arena of `threads` workers for the
// element-wise kernels. OpenBLAS keeps its own pool (see set_blas_threads).

#include <tbb/blocked_range.h>
#include <tbb/parallel_for.h>
#include <tbb/task_arena.h>

#include <cstddef>

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
};

// Sets OpenBLAS's thread pool size. Process-wide (OpenBLAS has one pool), so ranks running as
// threads of one process share the last value set.
void set_blas_threads(int threads);

}  // namespace tessera::layers
