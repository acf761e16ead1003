#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <random>
#include <vector>

#include "tessera/base/dtype.hpp"
#include "tessera/base/error.hpp"
#include "tessera/transport_kit/reduce.hpp"

namespace tessera {
namespace {

// The definition the kernels must match, written element by element in double-free code.
template <class T>
T reference_op(T a, T b, ReduceOp op) {
  switch (op) {
    case ReduceOp::sum:
    case ReduceOp::avg: return static_cast<T>(a + b);
    case ReduceOp::prod: return static_cast<T>(a * b);
    case ReduceOp::min:
      return std::isnan(static_cast<double>(a))              ? a
             : (b < a || std::isnan(static_cast<double>(b))) ? b
                                                             : a;
    case ReduceOp::max:
      return std::isnan(static_cast<double>(a))              ? a
             : (a < b || std::isnan(static_cast<double>(b))) ? b
                                                             : a;
  }
  return a;
}

template <class T>
void expect_matches_reference(ReduceOp op, std::size_t count, std::mt19937& rng) {
  std::uniform_int_distribution<int> pick(-4, 4);
  std::vector<T> acc(count);
  std::vector<T> in(count);
  for (std::size_t i = 0; i < count; ++i) {
    acc[i] = static_cast<T>(pick(rng)) / static_cast<T>(std::is_integral_v<T> ? 1 : 3);
    in[i] = static_cast<T>(pick(rng)) / static_cast<T>(std::is_integral_v<T> ? 1 : 7);
  }
  std::vector<T> expected(count);
  for (std::size_t i = 0; i < count; ++i) expected[i] = reference_op(acc[i], in[i], op);
  reduce_into(acc.data(), in.data(), count, dtype_of<T>::value, op);
  if (count == 0) return;  // empty vectors' data() may be null, and memcmp(null, ...) is UB
  ASSERT_EQ(0, std::memcmp(acc.data(), expected.data(), count * sizeof(T)))
      << reduce_op_name(op) << " count " << count;
}

TEST(ReduceKernels, EveryPlainTypeAndOpMatchesTheElementwiseDefinitionAtOddLengths) {
  std::mt19937 rng(7);
  for (ReduceOp op : kAllReduceOps) {
    for (std::size_t count : {0U, 1U, 7U, 15U, 16U, 17U, 1023U, 4099U}) {
      expect_matches_reference<float>(op, count, rng);
      expect_matches_reference<double>(op, count, rng);
      expect_matches_reference<std::int32_t>(op, count, rng);
      expect_matches_reference<std::int64_t>(op, count, rng);
    }
  }
}

TEST(ReduceKernels, PairWritesIntoAThirdBufferOrIntoEitherInput) {
  std::vector<float> a = {1, 2, 3};
  std::vector<float> b = {10, 20, 30};
  std::vector<float> out(3);
  reduce_pair(out.data(), a.data(), b.data(), 3, DType::f32, ReduceOp::sum);
  EXPECT_EQ(out, (std::vector<float>{11, 22, 33}));
  reduce_pair(b.data(), a.data(), b.data(), 3, DType::f32, ReduceOp::max);
  EXPECT_EQ(b, (std::vector<float>{10, 20, 30}));
  reduce_pair(a.data(), a.data(), b.data(), 3, DType::f32, ReduceOp::prod);
  EXPECT_EQ(a, (std::vector<float>{10, 40, 90}));
}

TEST(ReduceKernels, MinAndMaxPropagateNaNFromEitherSide) {
  const float nan = std::numeric_limits<float>::quiet_NaN();
  std::vector<float> acc = {nan, 1.0F, 2.0F};
  std::vector<float> in = {0.0F, nan, 1.0F};
  reduce_into(acc.data(), in.data(), 3, DType::f32, ReduceOp::min);
  EXPECT_TRUE(std::isnan(acc[0]));
  EXPECT_TRUE(std::isnan(acc[1]));
  EXPECT_EQ(acc[2], 1.0F);
}

TEST(ReduceKernels, SignedIntegersWrapInsteadOfOverflowing) {
  std::vector<std::int32_t> a = {std::numeric_limits<std::int32_t>::max(), -3};
  std::vector<std::int32_t> b = {1, 5};
  reduce_into(a.data(), b.data(), 2, DType::i32, ReduceOp::sum);
  EXPECT_EQ(a[0], std::numeric_limits<std::int32_t>::min());
  EXPECT_EQ(a[1], 2);
  std::vector<std::int64_t> c = {std::numeric_limits<std::int64_t>::max()};
  std::vector<std::int64_t> d = {2};
  reduce_into(c.data(), d.data(), 1, DType::i64, ReduceOp::prod);
  EXPECT_EQ(c[0], -2);
  std::vector<std::uint8_t> e = {200, 16};
  std::vector<std::uint8_t> f = {100, 16};
  reduce_into(e.data(), f.data(), 2, DType::u8, ReduceOp::sum);
  EXPECT_EQ(e, (std::vector<std::uint8_t>{44, 32}));
  reduce_into(e.data(), f.data(), 2, DType::u8, ReduceOp::prod);
  EXPECT_EQ(e, (std::vector<std::uint8_t>{(44 * 100) % 256, 0}));
}

// 1 + 2^-8 is a tie in bf16 and rounds back to 1, so stepwise rounding keeps 1 where a float
// accumulator would reach 1 + 2^-7: the kernel must round at every step.
TEST(ReduceKernels, Bf16RoundsBackToBf16AfterEveryStep) {
  const std::uint16_t one = float_to_bf16(1.0F);
  const std::uint16_t tiny = float_to_bf16(std::ldexp(1.0F, -8));
  std::vector<std::uint16_t> acc = {one};
  const std::vector<std::uint16_t> in = {tiny};
  reduce_into(acc.data(), in.data(), 1, DType::bf16, ReduceOp::sum);
  reduce_into(acc.data(), in.data(), 1, DType::bf16, ReduceOp::sum);
  EXPECT_EQ(bf16_to_float(acc[0]), 1.0F);
}

TEST(ReduceKernels, F16RoundsBackToF16AfterEveryStep) {
  const std::uint16_t one = float_to_f16(1.0F);
  const std::uint16_t tiny = float_to_f16(std::ldexp(1.0F, -11));
  std::vector<std::uint16_t> acc = {one, float_to_f16(3.0F)};
  const std::vector<std::uint16_t> in = {tiny, float_to_f16(0.5F)};
  reduce_into(acc.data(), in.data(), 2, DType::f16, ReduceOp::sum);
  reduce_into(acc.data(), in.data(), 2, DType::f16, ReduceOp::sum);
  EXPECT_EQ(f16_to_float(acc[0]), 1.0F);
  EXPECT_EQ(f16_to_float(acc[1]), 4.0F);
  reduce_into(acc.data(), in.data(), 2, DType::f16, ReduceOp::max);
  EXPECT_EQ(f16_to_float(acc[1]), 4.0F);
}

TEST(ReduceKernels, FinishAverageDividesOnlyForAvg) {
  std::vector<float> f = {9.0F, -3.0F};
  finish_average(f.data(), 2, DType::f32, ReduceOp::sum, 3);
  EXPECT_EQ(f, (std::vector<float>{9.0F, -3.0F}));
  finish_average(f.data(), 2, DType::f32, ReduceOp::avg, 3);
  EXPECT_EQ(f, (std::vector<float>{3.0F, -1.0F}));
  std::vector<std::int32_t> i = {-7, 7};
  finish_average(i.data(), 2, DType::i32, ReduceOp::avg, 2);
  EXPECT_EQ(i, (std::vector<std::int32_t>{-3, 3}));  // truncates toward zero
  std::vector<std::uint16_t> h = {float_to_bf16(3.0F)};
  finish_average(h.data(), 1, DType::bf16, ReduceOp::avg, 2);
  EXPECT_EQ(bf16_to_float(h[0]), 1.5F);
}

TEST(ReduceOpNames, ParseRoundTripsAndRejectsUnknownNames) {
  for (ReduceOp op : kAllReduceOps) EXPECT_EQ(parse_reduce_op(reduce_op_name(op)), op);
  EXPECT_EQ(parse_reduce_op("mean"), ReduceOp::avg);
  EXPECT_THROW((void)parse_reduce_op("xor"), InvalidArgument);
}

}  // namespace
}  // namespace tessera
