// What a zero rank holds, bounded by the model instead of by the strategy's own layout: the
// parameter count comes from the layer sizes, and the padding allowance from the documented
// granularity (shards are whole kGradNormBlock blocks), so a layout that hands a rank more than
// its 1/N share fails here even when every number it reports agrees with itself.
#include <gtest/gtest.h>

#include <vector>

#include "ddp_test_support.hpp"
#include "tessera/strategy_kit/gradient_sync.hpp"
#include "zero_strategy.hpp"
#include "zero_test_support.hpp"

namespace tessera {
namespace {

// zero_test_mlp(): Linear 64->128, 128->128, 128->10 (weights and biases).
constexpr std::size_t kModelParameters = (64 * 128 + 128) + (128 * 128 + 128) + (128 * 10 + 10);

std::size_t ceil_div(std::size_t a, std::size_t b) {
  return (a + b - 1) / b;
}

// The most one rank's share may be: the parameter count split over `world` ranks, rounded up
// to whole norm blocks.
std::size_t share_bound(int world) {
  const auto n = static_cast<std::size_t>(world);
  return ceil_div(kModelParameters, n * kGradNormBlock) * kGradNormBlock;
}

TEST(ZeroMemoryBound, OptimizerStateAndGradientShardsAreAtMostOneNthOfTheModel) {
  for (int world : {2, 3}) {
    testing::run_ranks(world, [world](std::shared_ptr<Communicator> comm) {
      for (auto stage : {zero::ZeroStage::one, zero::ZeroStage::two}) {
        zero::ZeroConfig config;
        config.stage = stage;
        zero::ZeroStrategy strategy(config);
        strategy.setup({comm, testing::zero_test_mlp(), testing::zero_test_adam(), 3, 0.0, 1});
        const auto report = strategy.memory_report();
        const std::size_t share = share_bound(world) * sizeof(float);
        const std::size_t whole = kModelParameters * sizeof(float);
        const std::size_t padded_whole =
            share_bound(world) * static_cast<std::size_t>(world) * sizeof(float);
        SCOPED_TRACE("world " + std::to_string(world) + " zero" +
                     (stage == zero::ZeroStage::one ? "1" : "2"));
        // Adam: two slots per parameter, of this rank's share only.
        EXPECT_LE(report.optimizer_state_bytes, 2 * share);
        EXPECT_GE(report.optimizer_state_bytes, 2 * whole / static_cast<std::size_t>(world));
        // Full parameters on every rank, padded at most to whole blocks per rank.
        EXPECT_GE(report.parameter_bytes, whole);
        EXPECT_LE(report.parameter_bytes, padded_whole);
        if (stage == zero::ZeroStage::two) {
          EXPECT_LE(report.gradient_bytes, share);
          EXPECT_GE(report.gradient_bytes, whole / static_cast<std::size_t>(world));
        } else {
          EXPECT_GE(report.gradient_bytes, whole);
          EXPECT_LE(report.gradient_bytes, padded_whole);
        }
      }
    });
  }
}

// The shard pieces of all ranks cover each padded element exactly once and no rank's pieces
// add up to more than its share of the model.
TEST(ZeroMemoryBound, EachRanksPiecesAreItsShareOfTheModel) {
  for (int world : {1, 2, 3, 4}) {
    const auto layout = ShardLayout::plan(kModelParameters, world, 1, 1);
    for (int r = 0; r < world; ++r) {
      std::size_t held = 0;
      for (const auto& piece : layout.pieces_of(r)) held += piece.size();
      EXPECT_EQ(held, layout.shard_size());
      EXPECT_LE(held, share_bound(world)) << "world " << world << " rank " << r;
    }
    EXPECT_LE(layout.padded_total(), share_bound(world) * static_cast<std::size_t>(world));
  }
}

}  // namespace
}  // namespace tessera
