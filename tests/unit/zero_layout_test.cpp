// ShardLayout geometry and what a zero rank really holds.
#include <gtest/gtest.h>

#include <algorithm>

#include "ddp_test_support.hpp"
#include "tessera/strategy_kit/gradient_sync.hpp"
#include "tessera/strategy_kit/shard_layout.hpp"
#include "zero_strategy.hpp"
#include "zero_test_support.hpp"

namespace tessera {
namespace {

TEST(ShardLayout, PiecesTileThePaddedVectorOnNormBlockBoundaries) {
  for (int world : {1, 2, 3, 4, 7}) {
    const auto layout = ShardLayout::plan(100'003, world, 10'000, 30'000);
    EXPECT_EQ(layout.padded_total() % (kGradNormBlock * static_cast<std::size_t>(world)), 0U);
    EXPECT_GE(layout.padded_total(), 100'003U);
    std::vector<int> owner(layout.padded_total(), -1);
    for (int r = 0; r < world; ++r) {
      std::size_t shard_offset = 0;
      for (const auto& piece : layout.pieces_of(r)) {
        EXPECT_EQ(piece.begin % kGradNormBlock, 0U);
        EXPECT_EQ(piece.shard_offset, shard_offset);
        shard_offset += piece.size();
        for (std::size_t i = piece.begin; i < piece.end; ++i) {
          ASSERT_EQ(owner[i], -1) << "element " << i << " owned twice";
          owner[i] = r;
        }
      }
      EXPECT_EQ(shard_offset, layout.shard_size());
    }
    EXPECT_EQ(std::count(owner.begin(), owner.end(), -1), 0);
  }
}

TEST(ShardLayout, BucketsDescendFromTheEndWithTheFirstOneSmall) {
  const auto layout = ShardLayout::plan(1'000'000, 2, 20'000, 200'000);
  const auto& buckets = layout.buckets();
  ASSERT_GE(buckets.size(), 3U);
  EXPECT_EQ(buckets.front().end, layout.padded_total());
  EXPECT_EQ(buckets.front().end - buckets.front().begin, 24'576U);  // 20 000 up to 2 x 4096
  EXPECT_EQ(buckets[1].end - buckets[1].begin, 204'800U);
  EXPECT_EQ(buckets.back().begin, 0U);
  for (std::size_t b = 1; b < buckets.size(); ++b) EXPECT_EQ(buckets[b].end, buckets[b - 1].begin);
}

TEST(ZeroMemory, ZeroTwoHoldsOnlyItsGradientAndOptimizerShards) {
  testing::run_ranks(2, [](std::shared_ptr<Communicator> world) {
    for (auto stage : {zero::ZeroStage::one, zero::ZeroStage::two}) {
      zero::ZeroConfig config;
      config.stage = stage;
      config.first_bucket_bytes = 4;
      config.bucket_cap_bytes = 4;
      zero::ZeroStrategy strategy(config);
      strategy.setup({world, testing::zero_test_mlp(), testing::zero_test_adam(), 3, 0.0, 1});
      const auto& layout = strategy.shard_layout();
      const auto report = strategy.memory_report();
      const std::size_t shard = layout.shard_size() * sizeof(float);
      EXPECT_EQ(report.parameter_bytes, layout.padded_total() * sizeof(float));
      EXPECT_EQ(report.optimizer_state_bytes, 2 * shard);
      if (stage == zero::ZeroStage::two) {
        EXPECT_EQ(report.gradient_bytes, shard);
        // Two staging windows, each at most the largest layer (128 x 128 + 128) plus the two
        // buckets at its edges.
        std::size_t bucket = 0;
        for (const auto& b : layout.buckets()) bucket = std::max(bucket, b.end - b.begin);
        EXPECT_LE(report.buffer_bytes, 2 * (16'512 + 2 * bucket) * sizeof(float));
        EXPECT_GT(report.buffer_bytes, 2 * 16'512 * sizeof(float));
      } else {
        EXPECT_EQ(report.gradient_bytes, layout.padded_total() * sizeof(float));
        EXPECT_EQ(report.buffer_bytes, 0U);
      }
    }
  });
}

}  // namespace
}  // namespace tessera
