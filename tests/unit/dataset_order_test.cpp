#include <gtest/gtest.h>

#include <algorithm>

#include "tessera/base/error.hpp"
#include "tessera/runtime/data_order.hpp"

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

// StepInfo::batch_offset: where a rank's share starts in its step's global batch, the full
// batches and the short last one alike, in an epoch resumed after 4 samples. In index order the
// global batch is consecutive, so the share's first index shows where it starts.
TEST(EpochShard, EachRanksBatchOffsetIsWhereItsShareStartsInTheGlobalBatch) {
  constexpr int kWorld = 3;
  std::vector<EpochShard> shards;
  for (int r = 0; r < kWorld; ++r) {
    EpochShardSpec spec{30, 0, 0, r, kWorld, 4};
    spec.shuffle = false;
    spec.consumed = 4;
    shards.emplace_back(spec);
  }
  ASSERT_EQ(shards[0].steps(), 3U);  // 12, 12 and the last 2 of 26: 1, 1, 0
  std::size_t step_begin = 4;
  for (std::size_t s = 0; s < shards[0].steps(); ++s) {
    std::size_t before = 0;
    for (const auto& shard : shards) {
      EXPECT_EQ(shard.batch_offset(s), before) << "step " << s;
      if (!shard.batch(s).empty()) {
        EXPECT_EQ(shard.batch(s).front(), step_begin + shard.batch_offset(s)) << "step " << s;
      }
      before += shard.batch(s).size();
    }
    EXPECT_EQ(before, shards[0].global_batch_size(s));
    step_begin += before;
  }
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

TEST(EpochShard, RejectsMoreSamplesConsumedThanTheEpochHas) {
  EpochShardSpec spec{10, 0, 0, 0, 2, 3};
  spec.consumed = 11;
  EXPECT_THROW(EpochShard{spec}, InvalidArgument);
  spec.consumed = 10;  // the epoch is over: nothing left to deal
  EXPECT_EQ(EpochShard(spec).steps(), 0U);
}

// An epoch run for `steps_before` steps at one world size, then resumed at another from the
// samples consumed: every sample of the epoch is seen exactly once over both parts.
void expect_every_sample_once_across_a_resume(std::size_t n, std::size_t batch, int world_before,
                                              std::size_t steps_before, int world_after) {
  SCOPED_TRACE(std::to_string(n) + " samples, batch " + std::to_string(batch) + ", " +
               std::to_string(world_before) + " -> " + std::to_string(world_after) +
               " ranks after " + std::to_string(steps_before) + " steps");
  std::vector<std::size_t> seen;
  std::size_t consumed = 0;
  for (int r = 0; r < world_before; ++r) {
    const EpochShard before(EpochShardSpec{n, 4, 9, r, world_before, batch});
    ASSERT_LT(steps_before, before.steps());
    for (std::size_t s = 0; s < steps_before; ++s) {
      seen.insert(seen.end(), before.batch(s).begin(), before.batch(s).end());
      if (r == 0) consumed += before.global_batch_size(s);
    }
  }
  ASSERT_EQ(seen.size(), consumed);
  std::size_t steps_after = 0;
  std::size_t dealt = 0;
  for (int r = 0; r < world_after; ++r) {
    EpochShardSpec spec{n, 4, 9, r, world_after, batch};
    spec.consumed = consumed;
    const EpochShard after(spec);
    if (r == 0) steps_after = after.steps();
    ASSERT_EQ(after.steps(), steps_after) << "every rank must run the same number of steps";
    for (std::size_t s = 0; s < after.steps(); ++s) {
      if (r == 0) dealt += after.global_batch_size(s);
    }
    seen.insert(seen.end(), after.indices().begin(), after.indices().end());
  }
  EXPECT_EQ(dealt, n - consumed);
  const std::size_t global_after = batch * static_cast<std::size_t>(world_after);
  EXPECT_EQ(steps_after, (n - consumed + global_after - 1) / global_after);
  ASSERT_EQ(seen.size(), n);
  std::sort(seen.begin(), seen.end());
  for (std::size_t i = 0; i < n; ++i) ASSERT_EQ(seen[i], i) << "sample seen twice or never";
}

TEST(EpochShard, AResumeAtAnotherWorldSizeSeesEverySampleOfTheEpochOnce) {
  // The case: 60000 samples, 32 per rank, 200 steps at 2 ranks (12,800 samples).
  expect_every_sample_once_across_a_resume(60000, 32, 2, 200, 3);
  expect_every_sample_once_across_a_resume(60000, 32, 2, 200, 1);
  // Uneven last global batches before and after the change; a rank may get an empty one.
  expect_every_sample_once_across_a_resume(1000, 7, 2, 13, 3);
  expect_every_sample_once_across_a_resume(1000, 7, 3, 5, 2);
  expect_every_sample_once_across_a_resume(1000, 7, 2, 71, 1);
  expect_every_sample_once_across_a_resume(101, 10, 2, 5, 4);
}

TEST(EpochShard, AResumeAtTheSameWorldSizeDealsTheSameBatches) {
  // Resuming after k whole global batches at the same world size must not change a single
  // batch: that is what makes a resumed run equal the uninterrupted one bit for bit.
  for (int r = 0; r < 3; ++r) {
    const EpochShard whole(EpochShardSpec{1000, 2, 5, r, 3, 16});
    EpochShardSpec rest_spec{1000, 2, 5, r, 3, 16};
    rest_spec.consumed = 4 * 48;
    const EpochShard rest(rest_spec);
    ASSERT_EQ(rest.steps(), whole.steps() - 4);
    for (std::size_t s = 0; s < rest.steps(); ++s) {
      EXPECT_TRUE(std::equal(rest.batch(s).begin(), rest.batch(s).end(), whole.batch(s + 4).begin(),
                             whole.batch(s + 4).end()));
      EXPECT_EQ(rest.global_batch_size(s), whole.global_batch_size(s + 4));
    }
  }
}

TEST(EpochShard, DealSplitsTheRestOfAnyAgreedOrder) {
  const std::vector<std::size_t> order = {9, 8, 7, 6, 5, 4, 3, 2, 1, 0};
  const auto rank0 = EpochShard::deal(order, 3, 0, 2, 2);
  const auto rank1 = EpochShard::deal(order, 3, 1, 2, 2);
  ASSERT_EQ(rank0.steps(), 2U);
  EXPECT_EQ(std::vector<std::size_t>(rank0.indices().begin(), rank0.indices().end()),
            (std::vector<std::size_t>{6, 5, 2, 1}));
  EXPECT_EQ(std::vector<std::size_t>(rank1.indices().begin(), rank1.indices().end()),
            (std::vector<std::size_t>{4, 3, 0}));
  EXPECT_EQ(rank0.global_batch_size(1), 3U);
}

}  // namespace
}  // namespace tessera
