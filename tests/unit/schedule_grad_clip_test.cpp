#include <gtest/gtest.h>

#include <vector>

#include "tessera/base/error.hpp"
#include "tessera/strategy_kit/grad_clip.hpp"

namespace tessera {
namespace {

TEST(GradClip, ShardedSumsOfSquaresGiveTheGlobalNorm) {
  std::vector<float> grads(1001);
  for (std::size_t i = 0; i < grads.size(); ++i) grads[i] = static_cast<float>(i % 7) - 3.0F;
  const double whole = gradient_sum_of_squares(grads);
  // Three "ranks" each hold a shard; the strategy would all-reduce these partial sums.
  const std::span<const float> all(grads);
  const double sharded = gradient_sum_of_squares(all.subspan(0, 333)) +
                         gradient_sum_of_squares(all.subspan(333, 334)) +
                         gradient_sum_of_squares(all.subspan(667));
  EXPECT_EQ(global_norm(whole), global_norm(sharded));
  double expected = 0.0;
  for (const float g : grads) expected += double{g} * g;
  EXPECT_EQ(whole, expected);  // small integers: every partial sum is exact
}

TEST(GradClip, ScalesToMaxNormOnlyWhenAbove) {
  std::vector<float> grads{3.0F, 4.0F};  // norm 5
  const double sum = gradient_sum_of_squares(grads);
  EXPECT_EQ(clip_coefficient(sum, 10.0F), 1.0F);
  EXPECT_EQ(clip_coefficient(sum, 0.0F), 1.0F);  // disabled
  const float c = clip_coefficient(sum, 1.0F);
  EXPECT_NEAR(c, 0.2F, 1e-6);
  scale_gradients(grads, c);
  EXPECT_NEAR(global_norm(gradient_sum_of_squares(grads)), 1.0F, 1e-5);
}

}  // namespace
}  // namespace tessera
