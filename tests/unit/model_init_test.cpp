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

// GPT-2's N(0, 0.02) on a not-nice shape: its moments, and a column slice of rows 7..30 (as a
// tensor-parallel split would hold it) gets the whole parameter's bits at its place.
TEST(InitializeParameter, NormalHasItsMomentsAndASliceGetsTheWholesBits) {
  ParamSpec whole{"c_attn.weight", {54, 37}, DType::f32, ParamInit::normal, 37, 54};
  whole.init_std = 0.02F;
  std::vector<float> values(54 * 37);
  initialize_parameter(whole, 9, 2, values);
  double mean = 0.0;
  double square = 0.0;
  for (const float v : values) {
    EXPECT_TRUE(std::isfinite(v));
    mean += v / static_cast<double>(values.size());
    square += double{v} * v / static_cast<double>(values.size());
  }
  EXPECT_NEAR(mean, 0.0, 0.0015);  // 3 sigma of the mean of 1998 draws
  EXPECT_NEAR(std::sqrt(square), 0.02, 0.0015);

  ParamSpec slice = whole;
  slice.shape = {23, 37};
  slice.slice = {0, 7, 30, {54, 37}};
  std::vector<float> part(23 * 37);
  initialize_parameter(slice, 9, 2, part);
  EXPECT_EQ(std::memcmp(part.data(), values.data() + 7 * 37, part.size() * sizeof(float)), 0);
  // A slice along the columns: rows whole, columns 5..16.
  ParamSpec columns = whole;
  columns.shape = {54, 11};
  columns.slice = {1, 5, 16, {54, 37}};
  std::vector<float> cols(54 * 11);
  initialize_parameter(columns, 9, 2, cols);
  for (std::size_t r = 0; r < 54; ++r) {
    for (std::size_t c = 0; c < 11; ++c) {
      ASSERT_EQ(cols[r * 11 + c], values[r * 37 + 5 + c]) << r << ", " << c;
    }
  }
  // The column slice in two pieces, as a ZeRO shard of a tensor-parallel slice holds it: the
  // second starts 100 elements (9 rows and 1 column) into the slice.
  std::vector<float> head(100);
  std::vector<float> tail(cols.size() - 100);
  initialize_parameter(columns, 9, 2, head, 0);
  initialize_parameter(columns, 9, 2, tail, 100);
  EXPECT_EQ(std::memcmp(head.data(), cols.data(), head.size() * sizeof(float)), 0);
  EXPECT_EQ(std::memcmp(tail.data(), cols.data() + 100, tail.size() * sizeof(float)), 0);
  whole.init_std = 0.0F;
  EXPECT_THROW(initialize_parameter(whole, 9, 2, values), InvalidArgument);
}

}  // namespace
}  // namespace tessera
