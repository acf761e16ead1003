#pragma once
// RecyclingHostAllocator: host memory that keeps its large blocks after they are freed and hands
// them out again for the next allocation of the same size. A GPT step allocates its logits and
// their gradient fresh each step ([tokens, vocabulary] floats: 103 MB at 512 tokens and GPT-2's
// vocabulary); above glibc's mmap threshold each such block is a new mapping whose first touch
// faults every page in and has the kernel clear it, a fifth of a small GPT's step. A recycled
// block is only zeroed again (the DeviceAllocator contract), which costs one pass and no faults.

#include <cstddef>
#include <mutex>
#include <vector>

#include "tessera/base/device_allocator.hpp"

namespace tessera::layers {

// Thread-safety: every method may be called from any thread (one mutex guards the kept blocks).
// Lifetime: the kept blocks are freed with the allocator; Tensors hold a shared_ptr to their
// allocator, so it outlives every block it handed out.
class RecyclingHostAllocator final : public DeviceAllocator {
 public:
  // Blocks of at least `min_block_bytes` are kept when freed, at most `max_kept_bytes` of them
  // in all (the oldest is freed first when a newer one does not fit); smaller blocks are freed
  // at once (malloc's own free lists serve them well).
  explicit RecyclingHostAllocator(std::size_t min_block_bytes = std::size_t{1} << 20,
                                  std::size_t max_kept_bytes = std::size_t{512} << 20);
  RecyclingHostAllocator(const RecyclingHostAllocator&) = delete;
  RecyclingHostAllocator& operator=(const RecyclingHostAllocator&) = delete;
  ~RecyclingHostAllocator() override;

  [[nodiscard]] Device device() const noexcept override { return Device::cpu(); }
  // Zero-filled, as every DeviceAllocator's: a kept block of the same rounded size if there is
  // one, a new one otherwise, the kept blocks (of other sizes) freed first when the request is
  // large, so that a change of size never holds both. Throws OutOfMemory naming the size.
  [[nodiscard]] void* allocate(std::size_t bytes) override;
  void deallocate(void* pointer, std::size_t bytes) noexcept override;
  void copy(BufferView dst, BufferView src) const override;

  // Bytes held in kept blocks now (for tests and reports).
  [[nodiscard]] std::size_t kept_bytes() const;

 private:
  struct Block {
    void* pointer = nullptr;
    std::size_t bytes = 0;  // rounded to kDeviceAlignment
  };
  // Frees every kept block. Called with mutex_ held (or from the destructor).
  void release_kept() noexcept;

  std::size_t min_block_bytes_;
  std::size_t max_kept_bytes_;
  mutable std::mutex mutex_;
  std::vector<Block> kept_;  // oldest first
  std::size_t kept_bytes_ = 0;
};

}  // namespace tessera::layers
