#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>

#include "layers/compute_context.hpp"
#include "layers/recycling_allocator.hpp"
#include "tessera/base/tensor.hpp"

namespace tessera::layers {
namespace {

constexpr std::size_t kMiB = std::size_t{1} << 20;

bool all_zero(const void* pointer, std::size_t bytes) {
  const auto* p = static_cast<const unsigned char*>(pointer);
  return std::all_of(p, p + bytes, [](unsigned char b) { return b == 0; });
}

TEST(RecyclingHostAllocator, AFreedLargeBlockComesBackForTheSameSizeZeroFilled) {
  RecyclingHostAllocator allocator(kMiB, 8 * kMiB);
  void* first = allocator.allocate(2 * kMiB);
  std::memset(first, 0x5a, 2 * kMiB);
  allocator.deallocate(first, 2 * kMiB);
  EXPECT_EQ(allocator.kept_bytes(), 2 * kMiB);

  void* again = allocator.allocate(2 * kMiB);
  EXPECT_EQ(again, first);
  EXPECT_TRUE(all_zero(again, 2 * kMiB));
  EXPECT_EQ(allocator.kept_bytes(), 0U);
  allocator.deallocate(again, 2 * kMiB);
}

TEST(RecyclingHostAllocator, ALargeRequestOfAnotherSizeFreesTheKeptBlocksInsteadOfHoldingBoth) {
  // Training's logits kept, then an evaluation's of another batch: holding the kept blocks
  // beside the new one would raise the peak by what is kept.
  RecyclingHostAllocator allocator(kMiB, 8 * kMiB);
  void* first = allocator.allocate(2 * kMiB);
  void* second = allocator.allocate(2 * kMiB);
  allocator.deallocate(first, 2 * kMiB);
  allocator.deallocate(second, 2 * kMiB);
  ASSERT_EQ(allocator.kept_bytes(), 4 * kMiB);
  void* other = allocator.allocate(3 * kMiB);
  EXPECT_EQ(allocator.kept_bytes(), 0U);
  allocator.deallocate(other, 3 * kMiB);
  EXPECT_EQ(allocator.kept_bytes(), 3 * kMiB);
}

TEST(RecyclingHostAllocator, ASmallRequestLeavesTheKeptBlocksAlone) {
  RecyclingHostAllocator allocator(kMiB, 8 * kMiB);
  void* large = allocator.allocate(2 * kMiB);
  allocator.deallocate(large, 2 * kMiB);
  void* small = allocator.allocate(4096);
  EXPECT_EQ(allocator.kept_bytes(), 2 * kMiB);
  allocator.deallocate(small, 4096);
}

TEST(RecyclingHostAllocator, BlocksUnderTheMinimumAreFreedAtOnce) {
  RecyclingHostAllocator allocator(kMiB, 8 * kMiB);
  allocator.deallocate(allocator.allocate(kMiB - 64), kMiB - 64);
  EXPECT_EQ(allocator.kept_bytes(), 0U);
}

TEST(RecyclingHostAllocator, TheOldestKeptBlockIsFreedWhenANewerOneWouldPassTheCap) {
  RecyclingHostAllocator allocator(kMiB, 3 * kMiB);
  void* older = allocator.allocate(2 * kMiB);
  void* newer = allocator.allocate(2 * kMiB);
  allocator.deallocate(older, 2 * kMiB);
  allocator.deallocate(newer, 2 * kMiB);
  EXPECT_EQ(allocator.kept_bytes(), 2 * kMiB);
  void* again = allocator.allocate(2 * kMiB);
  EXPECT_EQ(again, newer);
  allocator.deallocate(again, 2 * kMiB);
}

TEST(RecyclingHostAllocator, ATensorOfTheComputeContextsLargeBuffersReusesTheLastOnesMemory) {
  const ComputeContext compute(1);
  const void* first = nullptr;
  {
    Tensor logits({512, 1024}, DType::f32, compute.large_buffers());
    first = logits.view().data;
    logits.as<float>()[7] = 1.0F;
  }
  Tensor next({512, 1024}, DType::f32, compute.large_buffers());
  EXPECT_EQ(next.view().data, first);
  EXPECT_EQ(next.as<float>()[7], 0.0F);
}

}  // namespace
}  // namespace tessera::layers
