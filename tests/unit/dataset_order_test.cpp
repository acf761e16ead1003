#include <gtest/gtest.h>

#include <algorithm>

#include "tessera/data_order.hpp"
#include "tessera/error.hpp"

namespace tessera {
namespace {

// Every sample of the epoch, gathered over all ranks step by step.
std::vector<std::size_t> union_over_ranks(std::size_t n, int world, std::size_t batch,
                                          std::uint64_t epoch) {
  std::vector<std::size_t> seen;
  std::size_t steps = 0;
  for (int r = 0; r < world; ++r) {
    const EpochShard shard(EpochShardSpec{n, epoch, 11, r, world, batch});
    if (r == 0) steps = shard.steps();
    EXPECT_EQ(shard.steps(), steps) << "every rank must run the same number of steps";
    seen.insert(seen.end(), shard.indices().begin(), shard.indices().end());
  }
  return seen;
}

TEST(EpochShard, EverySampleIsSeenExactlyOnceAcrossRanks) {
  for (const auto& [n, world, batch] : std::vector<std::tuple<std::size_t, int, std::size_t>>{
           {60000, 2, 256}, {1000, 3, 7}, {10, 4, 8}, {5, 8, 1}, {64, 2, 32}}) {
    std::vector<std::size_t> seen = union_over_ranks(n, world, batch, 2);
    std::sort(seen.begin(), seen.end());
    ASSERT_EQ(seen.size(), n) << n << " samples, world " << world << ", batch " << batch;
    for (std::size_t i = 0; i < n; ++i) ASSERT_EQ(seen[i], i);
  }
}

TEST(EpochShard, SplitsTheLastPartialGlobalBatchAsEvenlyAsPossible) {
  // 1000 samples, 3 ranks x 64: 5 full global batches (960) and 40 left: 14, 13, 13.
  std::vector<std::size_t> last_sizes;
  for (int r = 0; r < 3; ++r) {
    const EpochShard shard(EpochShardSpec{1000, 0, 1, r, 3, 64});
    ASSERT_EQ(shard.steps(), 6U);
    EXPECT_EQ(shard.batch(0).size(), 64U);
    EXPECT_EQ(shard.global_batch_size(0), 192U);
    EXPECT_EQ(shard.global_batch_size(5), 40U);
    last_sizes.push_back(shard.batch(5).size());
  }
  EXPECT_EQ(last_sizes, (std::vector<std::size_t>{14, 13, 13}));
}

TEST(EpochShard, EachEpochShufflesDifferentlyButReproducibly) {
  const EpochShard a(EpochShardSpec{500, 0, 3, 0, 1, 50});
  const EpochShard again(EpochShardSpec{500, 0, 3, 0, 1, 50});
  const EpochShard next(EpochShardSpec{500, 1, 3, 0, 1, 50});
  EXPECT_TRUE(std::equal(a.indices().begin(), a.indices().end(), again.indices().begin()));
  EXPECT_FALSE(std::equal(a.indices().begin(), a.indices().end(), next.indices().begin()));
}

TEST(EpochShard, WithoutShuffleRanksTakeConsecutiveBlocks) {
  EpochShardSpec spec{10, 0, 0, 1, 2, 3};
  spec.shuffle = false;
  const EpochShard shard(spec);
  ASSERT_EQ(shard.steps(), 2U);
  EXPECT_EQ(std::vector<std::size_t>(shard.batch(0).begin(), shard.batch(0).end()),
            (std::vector<std::size_t>{3, 4, 5}));
  EXPECT_EQ(std::vector<std::size_t>(shard.batch(1).begin(), shard.batch(1).end()),
            (std::vector<std::size_t>{8, 9}));
}

TEST(EpochShard, RejectsARankOutsideTheWorld) {
  EXPECT_THROW(EpochShard(EpochShardSpec{10, 0, 0, 2, 2, 1}), InvalidArgument);
  EXPECT_THROW(EpochShard(EpochShardSpec{10, 0, 0, 0, 1, 0}), InvalidArgument);
}

}  // namespace
}  // namespace tessera
