#include "layers/recycling_allocator.hpp"

#include <cstdlib>
#include <cstring>
#include <new>
#include <string>

#include "tessera/base/error.hpp"

namespace tessera::layers {
namespace {

// Sizes are kept rounded to the alignment, so that blocks of nearly equal sizes match.
// Wraps around for sizes near SIZE_MAX (allocate refuses those).
std::size_t rounded_size(std::size_t bytes) noexcept {
  return bytes == 0 ? kDeviceAlignment
                    : (bytes + kDeviceAlignment - 1) / kDeviceAlignment * kDeviceAlignment;
}

OutOfMemory out_of_memory(std::size_t bytes) {
  return OutOfMemory("out of memory on cpu: could not allocate " + std::to_string(bytes) +
                     " bytes; lower the batch size or the model size, or free memory on the host");
}

}  // namespace

RecyclingHostAllocator::RecyclingHostAllocator(std::size_t min_block_bytes,
                                               std::size_t max_kept_bytes)
    : min_block_bytes_(min_block_bytes), max_kept_bytes_(max_kept_bytes) {}

RecyclingHostAllocator::~RecyclingHostAllocator() {
  release_kept();
}

void RecyclingHostAllocator::release_kept() noexcept {
  for (const Block& block : kept_) std::free(block.pointer);
  kept_.clear();
  kept_bytes_ = 0;
}

void* RecyclingHostAllocator::allocate(std::size_t bytes) {
  const std::size_t rounded = rounded_size(bytes);
  if (rounded < bytes) throw out_of_memory(bytes);
  void* pointer = nullptr;
  if (rounded >= min_block_bytes_) {
    const std::lock_guard lock(mutex_);
    for (auto it = kept_.begin(); it != kept_.end(); ++it) {
      if (it->bytes != rounded) continue;
      pointer = it->pointer;
      kept_bytes_ -= it->bytes;
      kept_.erase(it);
      break;
    }
    // A large block of a size none kept has (an evaluation's batch after training's): the kept
    // ones serve no request now, and holding them beside the new block would raise the peak by
    // up to max_kept_bytes. They go back first; the other size's blocks come once again.
    if (pointer == nullptr) release_kept();
  }
  if (pointer == nullptr) pointer = std::aligned_alloc(kDeviceAlignment, rounded);
  if (pointer == nullptr) throw out_of_memory(bytes);
  std::memset(pointer, 0, rounded);
  return pointer;
}

void RecyclingHostAllocator::deallocate(void* pointer, std::size_t bytes) noexcept {
  if (pointer == nullptr) return;
  const std::size_t rounded = rounded_size(bytes);
  if (rounded < min_block_bytes_ || rounded > max_kept_bytes_) {
    std::free(pointer);
    return;
  }
  const std::lock_guard lock(mutex_);
  while (kept_bytes_ + rounded > max_kept_bytes_) {
    std::free(kept_.front().pointer);
    kept_bytes_ -= kept_.front().bytes;
    kept_.erase(kept_.begin());
  }
  try {
    kept_.push_back({pointer, rounded});
    kept_bytes_ += rounded;
  } catch (const std::bad_alloc&) {
    std::free(pointer);  // no room to remember it: give it back instead
  }
}

void RecyclingHostAllocator::copy(BufferView dst, BufferView src) const {
  cpu_allocator()->copy(dst, src);
}

std::size_t RecyclingHostAllocator::kept_bytes() const {
  const std::lock_guard lock(mutex_);
  return kept_bytes_;
}

}  // namespace tessera::layers
