// zero3's ShardedGradNorm against the definition over the whole flat gradient (per block of
// kGradNormBlock elements in element order, then the blocks in order), on unit shapes where
// some norm blocks lie entirely inside one rank's shard and others are cut between ranks: the
// two paths of the computation. Layers of a few thousand parameters, like the strategy tests'
// own, cut every block, and a bug in the first path would go unseen.
#include <gtest/gtest.h>

#include <algorithm>

#include "ddp_test_support.hpp"
#include "mlp/mlp_model.hpp"
#include "sharded_grad_norm.hpp"
#include "spread_gradients.hpp"
#include "tessera/strategy_kit/gradient_sync.hpp"
#include "unit_plan.hpp"

namespace tessera {
namespace {

using testing::run_ranks;

// Squares that sum to other doubles in another order, or from a block's partials.
std::vector<float> spread_gradients(std::size_t count) {
  return testing::spread_gradients(count, 977);
}

double whole_vector_sum_of_squares(const std::vector<float>& g) {
  std::vector<double> blocks;
  accumulate_norm_blocks(g, 0, blocks);
  return sum_norm_blocks(blocks);
}

// Rank r's shard storage in the plan's layout: its part of every unit, zero padding after.
std::vector<float> shards_of(const zero3::UnitPlan& plan, const std::vector<float>& g, int rank) {
  std::vector<float> shards(plan.shard_total, 0.0F);
  for (const auto& unit : plan.units) {
    const std::size_t begin = unit.owned_begin(rank);
    const std::size_t end = unit.owned_end(rank);
    for (std::size_t i = begin; i < end; ++i)
      shards[unit.shard_offset + i - begin] = g[unit.flat_begin + i];
  }
  return shards;
}

struct BlockKinds {
  std::size_t inside_one_shard = 0;
  std::size_t cut_between_ranks = 0;
};

// Counted from the plan's ownership, independently of ShardedGradNorm's own bookkeeping.
BlockKinds block_kinds(const zero3::UnitPlan& plan, int world, std::size_t total) {
  std::vector<std::vector<bool>> owners((total + kGradNormBlock - 1) / kGradNormBlock,
                                        std::vector<bool>(static_cast<std::size_t>(world)));
  for (const auto& unit : plan.units) {
    for (int r = 0; r < world; ++r) {
      for (std::size_t i = unit.owned_begin(r); i < unit.owned_end(r); ++i)
        owners[(unit.flat_begin + i) / kGradNormBlock][static_cast<std::size_t>(r)] = true;
    }
  }
  BlockKinds kinds;
  for (const auto& block : owners) {
    const auto count = std::count(block.begin(), block.end(), true);
    (count == 1 ? kinds.inside_one_shard : kinds.cut_between_ranks) += 1;
  }
  return kinds;
}

void expect_every_rank_gets_the_whole_vector_sum(const std::vector<std::size_t>& sizes, int world) {
  mlp::MlpConfig config;
  config.sizes = sizes;
  const mlp::MlpModel model(config);
  const FlatLayout layout = FlatLayout::of(model);
  const auto plan = zero3::UnitPlan::make(model, layout, 1, world);
  const auto g = spread_gradients(layout.total);
  const double expected = whole_vector_sum_of_squares(g);
  const BlockKinds kinds = block_kinds(plan, world, layout.total);
  ASSERT_GT(kinds.inside_one_shard, 0U) << "no norm block lies inside one shard";
  if (world > 1) {
    ASSERT_GT(kinds.cut_between_ranks, 0U) << "no norm block is cut between ranks";
  }

  std::vector<double> sums(static_cast<std::size_t>(world));
  run_ranks(world, [&](std::shared_ptr<Communicator> group) {
    const int rank = group->rank();
    zero3::ShardedGradNorm norm(plan, rank, world);
    const auto shards = shards_of(plan, g, rank);
    sums[static_cast<std::size_t>(rank)] =
        norm.sum_of_squares(shards, *group, nullptr, testing::kTestTimeout);
  });
  for (int r = 0; r < world; ++r) {
    EXPECT_EQ(sums[static_cast<std::size_t>(r)], expected)
        << "rank " << r << " of " << world << ": " << kinds.inside_one_shard
        << " blocks inside one shard, " << kinds.cut_between_ranks << " cut between ranks";
  }
}

TEST(ShardedGradNorm, TheDataTellsABlockSummedFromPartialsFromTheDefinition) {
  const auto g = spread_gradients(2 * kGradNormBlock);
  std::vector<double> whole;
  accumulate_norm_blocks(g, 0, whole);
  std::vector<double> halves(2, 0.0);
  const std::span<const float> all(g);
  accumulate_norm_blocks(all.first(kGradNormBlock / 2 + 7), 0, halves);
  std::vector<double> rest(2, 0.0);
  accumulate_norm_blocks(all.subspan(kGradNormBlock / 2 + 7), kGradNormBlock / 2 + 7, rest);
  EXPECT_NE(halves[0] + rest[0], whole[0]) << "partials of a block sum to the same double";
}

// A 64 x 512 layer (33,280 parameters) between small ones: its shard holds whole norm blocks on
// every rank, its edges and the small layers cut blocks between ranks.
TEST(ShardedGradNorm, EqualsTheWholeVectorSumWhereBlocksLieInsideSingleShards) {
  for (int world : {1, 2, 3, 4}) {
    SCOPED_TRACE("world " + std::to_string(world));
    expect_every_rank_gets_the_whole_vector_sum({24, 64, 512, 10}, world);
  }
}

// Two wide layers back to back, then an 8 x 1 layer (9 parameters, one 16-element shard) that
// every rank but the first owns nothing of.
TEST(ShardedGradNorm, EqualsTheWholeVectorSumWithRaggedUnitsAndRanksThatOwnNothingOfOne) {
  for (int world : {2, 3, 5}) {
    SCOPED_TRACE("world " + std::to_string(world));
    expect_every_rank_gets_the_whole_vector_sum({40, 300, 130, 8, 1}, world);
  }
}

}  // namespace
}  // namespace tessera
