#include <gtest/gtest.h>

#include <cmath>
#include <cstring>

#include "tessera/base/error.hpp"
#include "tessera/strategy_kit/init.hpp"

namespace tessera {
namespace {

ParamSpec weight_spec() {
  return ParamSpec{"w", {64, 100}, DType::f32, ParamInit::kaiming_uniform, 100, 64};
}

TEST(InitializeParameter, AnyShardGetsTheBitsOfTheWholeTensor) {
  const ParamSpec spec = weight_spec();
  std::vector<float> whole(6400);
  initialize_parameter(spec, 7, 3, whole);
  for (const std::size_t cut : {std::size_t{1}, std::size_t{999}, std::size_t{3200}}) {
    std::vector<float> left(cut);
    std::vector<float> right(6400 - cut);
    initialize_parameter(spec, 7, 3, left, 0);
    initialize_parameter(spec, 7, 3, right, cut);
    EXPECT_EQ(std::memcmp(whole.data(), left.data(), cut * sizeof(float)), 0);
    EXPECT_EQ(std::memcmp(whole.data() + cut, right.data(), right.size() * sizeof(float)), 0);
  }
}

TEST(InitializeParameter, KaimingUniformStaysInItsBoundAndVariesWithSeedAndIndex) {
  const ParamSpec spec = weight_spec();
  std::vector<float> a(6400);
  std::vector<float> b(6400);
  std::vector<float> c(6400);
  initialize_parameter(spec, 7, 3, a);
  initialize_parameter(spec, 8, 3, b);
  initialize_parameter(spec, 7, 4, c);
  const float bound = std::sqrt(6.0F / 100.0F);
  double mean = 0.0;
  double square = 0.0;
  for (const float v : a) {
    EXPECT_LE(std::abs(v), bound);
    mean += v / 6400.0;
    square += double{v} * v / 6400.0;
  }
  EXPECT_NEAR(mean, 0.0, 0.02);
  EXPECT_NEAR(square, bound * bound / 3.0, 0.01);  // variance of U(-b, b)
  EXPECT_NE(std::memcmp(a.data(), b.data(), a.size() * sizeof(float)), 0);
  EXPECT_NE(std::memcmp(a.data(), c.data(), a.size() * sizeof(float)), 0);
}

TEST(InitializeParameter, ZerosOnesAndRangeChecks) {
  ParamSpec spec{"b", {10}, DType::f32, ParamInit::ones};
  std::vector<float> out(10, 5.0F);
  initialize_parameter(spec, 0, 0, out);
  for (const float v : out) EXPECT_EQ(v, 1.0F);
  spec.init = ParamInit::zeros;
  initialize_parameter(spec, 0, 0, out);
  for (const float v : out) EXPECT_EQ(v, 0.0F);
  EXPECT_THROW(initialize_parameter(spec, 0, 0, out, 1), InvalidArgument);
  spec.init = ParamInit::kaiming_uniform;  // without fan_in
  EXPECT_THROW(initialize_parameter(spec, 0, 0, out), InvalidArgument);
}

}  // namespace
}  // namespace tessera
