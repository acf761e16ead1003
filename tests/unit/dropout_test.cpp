// Counter-based dropout (layers/dropout.hpp): the mask is a pure function of (seed, step, site,
// element), so a shard of the batch draws the whole batch's bits there; about p of a large
// tensor is dropped; rate 0 changes nothing; backward draws the forward's mask again.
#include "layers/dropout.hpp"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <vector>

#include "tessera/base/random.hpp"

namespace tessera::layers {
namespace {

std::vector<float> activations(std::size_t n) {
  std::vector<float> v(n);
  for (std::size_t i = 0; i < n; ++i) v[i] = 2.0F * counter_uniform(3, 9, i) - 1.0F + 1e-3F;
  return v;
}

TEST(Dropout, DropsAboutPOfALargeTensorAndScalesTheRestByOneOverOneMinusP) {
  constexpr std::size_t kN = 1 << 20;
  const auto x = activations(kN);
  for (const float p : {0.1F, 0.5F, 0.9F}) {
    std::vector<float> y(kN);
    dropout_forward<float>(y, x, p, {7, 3, 2, 0});
    std::size_t dropped = 0;
    for (std::size_t i = 0; i < kN; ++i) {
      if (y[i] == 0.0F) {
        ++dropped;
      } else {
        ASSERT_EQ(y[i], x[i] * (1.0F / (1.0F - p))) << "p " << p << " element " << i;
      }
    }
    // Binomial: the standard deviation of the rate is sqrt(p (1 - p) / n) < 5e-4.
    EXPECT_NEAR(static_cast<double>(dropped) / kN, p, 3e-3) << "p " << p;
  }
}

TEST(Dropout, RateZeroCopiesForwardAndAddsBackwardBitForBit) {
  const auto x = activations(1001);
  std::vector<float> y(x.size(), 5.0F);
  dropout_forward<float>(y, x, 0.0F, {7, 3, 2, 0});
  EXPECT_EQ(std::memcmp(y.data(), x.data(), x.size() * sizeof(float)), 0);
  std::vector<float> grad(x.size(), 0.0F);
  dropout_backward<float>(grad, x, 0.0F, {7, 3, 2, 0});
  EXPECT_EQ(std::memcmp(grad.data(), x.data(), x.size() * sizeof(float)), 0);
}

// A rank holding rows [first, first + n) of the batch draws the whole batch's mask there, at
// any cut; another step, site or seed draws another mask.
TEST(Dropout, AShardOfTheBatchDrawsTheWholeBatchsBitsAndEachKeyItsOwnMask) {
  constexpr std::size_t kN = 4099;
  const auto x = activations(kN);
  const DropoutKey key{7, 3, 2, 0};
  std::vector<float> whole(kN);
  dropout_forward<float>(whole, x, 0.3F, key);
  for (const std::size_t cut : {std::size_t{1}, std::size_t{1366}, std::size_t{4098}}) {
    std::vector<float> parts(kN);
    dropout_forward<float>(std::span(parts).first(cut), std::span<const float>(x).first(cut), 0.3F,
                           key);
    dropout_forward<float>(std::span(parts).subspan(cut), std::span<const float>(x).subspan(cut),
                           0.3F, {7, 3, 2, cut});
    EXPECT_EQ(std::memcmp(parts.data(), whole.data(), kN * sizeof(float)), 0) << "cut " << cut;
  }
  for (const DropoutKey other :
       {DropoutKey{7, 4, 2, 0}, DropoutKey{7, 3, 3, 0}, DropoutKey{8, 3, 2, 0}}) {
    std::vector<float> y(kN);
    dropout_forward<float>(y, x, 0.3F, other);
    std::size_t differ = 0;
    for (std::size_t i = 0; i < kN; ++i) differ += (y[i] == 0.0F) != (whole[i] == 0.0F) ? 1 : 0;
    // Two independent masks of rate 0.3 disagree on 2 * 0.3 * 0.7 = 42 % of the elements.
    EXPECT_GT(differ, kN / 3) << "step " << other.step << " site " << other.site;
  }
}

TEST(Dropout, BackwardAddsTheGradientThroughTheForwardsMask) {
  constexpr std::size_t kN = 777;
  const auto x = activations(kN);
  const auto dy = activations(kN);
  const DropoutKey key{1, 9, 4, 100};
  std::vector<float> y(kN);
  dropout_forward<float>(y, x, 0.25F, key);
  std::vector<float> dx(kN, 1.0F);
  dropout_backward<float>(dx, dy, 0.25F, key);
  for (std::size_t i = 0; i < kN; ++i) {
    const float expected = y[i] == 0.0F ? 1.0F : 1.0F + dy[i] * (1.0F / 0.75F);
    EXPECT_EQ(dx[i], expected) << "element " << i;
  }
}

TEST(Dropout, RefusesARateOutsideZeroToOne) {
  std::vector<float> v(4);
  EXPECT_THROW(dropout_forward<float>(v, v, 1.0F, {}), InvalidArgument);
  EXPECT_THROW(dropout_forward<float>(v, v, -0.1F, {}), InvalidArgument);
}

}  // namespace
}  // namespace tessera::layers
