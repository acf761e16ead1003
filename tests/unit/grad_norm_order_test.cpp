// The gradient norm's summation order, on values whose squares add to different doubles in a
// different order (magnitudes spread over 2^-30 .. 2^30): per block of kGradNormBlock elements
// in element order, then the blocks in order. Each test checks first that its data tells the
// orders apart, so it cannot pass by being insensitive to them.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <vector>

#include "spread_gradients.hpp"
#include "tessera/strategy_kit/grad_clip.hpp"
#include "tessera/strategy_kit/gradient_sync.hpp"

namespace tessera {
namespace {

using testing::spread_gradients;

// The definition, written out: each block's squares in element order, then blocks in order.
double reference_sum_of_squares(const std::vector<float>& g) {
  std::vector<double> blocks((g.size() + kGradNormBlock - 1) / kGradNormBlock, 0.0);
  for (std::size_t i = 0; i < g.size(); ++i) {
    const auto v = static_cast<double>(g[i]);
    blocks[i / kGradNormBlock] += v * v;
  }
  double total = 0.0;
  for (const double b : blocks) total += b;
  return total;
}

double reversed_sum_of_squares(const std::vector<float>& g) {
  std::vector<double> blocks((g.size() + kGradNormBlock - 1) / kGradNormBlock, 0.0);
  for (std::size_t i = g.size(); i-- > 0;) {
    const auto v = static_cast<double>(g[i]);
    blocks[i / kGradNormBlock] += v * v;
  }
  double total = 0.0;
  for (std::size_t b = blocks.size(); b-- > 0;) total += blocks[b];
  return total;
}

// 11 blocks and a partial one: the 8-block fast path, the per-block path and a ragged tail.
constexpr std::size_t kCount = 11 * kGradNormBlock + 1234;

TEST(GradNormOrder, BlocksSumInElementOrderAndThenInBlockOrder) {
  const auto g = spread_gradients(kCount);
  const double expected = reference_sum_of_squares(g);
  ASSERT_NE(expected, reversed_sum_of_squares(g)) << "the data does not tell orders apart";
  std::vector<double> blocks;
  accumulate_norm_blocks(g, 0, blocks);
  ASSERT_EQ(blocks.size(), 12U);
  EXPECT_EQ(sum_norm_blocks(blocks), expected);
  // Every block on its own, against the definition.
  for (std::size_t b = 0; b < blocks.size(); ++b) {
    double block = 0.0;
    for (std::size_t i = b * kGradNormBlock; i < std::min(kCount, (b + 1) * kGradNormBlock); ++i)
      block += static_cast<double>(g[i]) * static_cast<double>(g[i]);
    EXPECT_EQ(blocks[b], block) << "block " << b;
  }
}

// Block partials add left to right: 2^53 + 1 rounds back to 2^53 every time, where any
// regrouping (pairs first, as std::reduce may) reaches 2^53 + 2 or more.
TEST(GradNormOrder, BlockPartialsAddStrictlyLeftToRight) {
  const double big = std::ldexp(1.0, 53);
  const std::vector<double> blocks = {big, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0};
  ASSERT_NE((big + 1.0) + 1.0, big + (1.0 + 1.0)) << "the data does not tell groupings apart";
  EXPECT_EQ(sum_norm_blocks(blocks), big);
}

TEST(GradNormOrder, ShardsOnBlockBoundariesGiveTheWholeVectorsBits) {
  const auto g = spread_gradients(kCount);
  const std::span<const float> all(g);
  std::vector<double> whole;
  accumulate_norm_blocks(all, 0, whole);
  // Three "ranks" hold pieces starting on block boundaries, handed in pieces of odd sizes (the
  // way buckets and layers cut them), each at its flat offset.
  std::vector<double> sharded;
  const std::vector<std::size_t> cuts = {
      0, 1, 3 * kGradNormBlock - 5, 3 * kGradNormBlock, 9 * kGradNormBlock + 17, kCount};
  for (std::size_t k = 0; k + 1 < cuts.size(); ++k)
    accumulate_norm_blocks(all.subspan(cuts[k], cuts[k + 1] - cuts[k]), cuts[k], sharded);
  EXPECT_EQ(sharded, whole);
  EXPECT_EQ(global_norm(sum_norm_blocks(sharded)),
            static_cast<float>(std::sqrt(reference_sum_of_squares(g))));
}

TEST(GradNormOrder, SumOfSquaresOfASpanIsExactlyItsDocumentedGrouping) {
  const auto g = spread_gradients(1003);
  // gradient_sum_of_squares: four interleaved accumulators over i % 4, the tail into the first,
  // combined as (a0 + a1) + (a2 + a3).
  double acc[4] = {0.0, 0.0, 0.0, 0.0};
  std::size_t i = 0;
  for (; i + 4 <= g.size(); i += 4)
    for (std::size_t k = 0; k < 4; ++k) acc[k] += static_cast<double>(g[i + k]) * g[i + k];
  for (; i < g.size(); ++i) acc[0] += static_cast<double>(g[i]) * g[i];
  const double expected = (acc[0] + acc[1]) + (acc[2] + acc[3]);
  double in_order = 0.0;
  for (const float v : g) in_order += static_cast<double>(v) * v;
  EXPECT_EQ(gradient_sum_of_squares(g), expected);
  EXPECT_NEAR(gradient_sum_of_squares(g), in_order, 1e-12 * in_order);
}

TEST(GradClip, CoefficientIsMaxNormOverNormPlusEpsilonInFloat) {
  // Norms where max_norm / (norm + 1e-6) and max_norm / norm differ in float.
  for (const float norm : {1e-3F, 0.37F, 3.0F, 1234.5F}) {
    const double sum = static_cast<double>(norm) * static_cast<double>(norm);
    const float max_norm = norm / 7.0F;
    const float expected = max_norm / (static_cast<float>(std::sqrt(sum)) + 1e-6F);
    EXPECT_EQ(clip_coefficient(sum, max_norm), expected) << "norm " << norm;
    EXPECT_EQ(clip_coefficient(sum, norm * 2.0F), 1.0F);
  }
  EXPECT_NE(clip_coefficient(1e-6, 1e-4F), 1e-4F / 1e-3F) << "the 1e-6 must be in the denominator";
}

}  // namespace
}  // namespace tessera
