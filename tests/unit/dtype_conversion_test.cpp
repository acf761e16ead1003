#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <cstdint>
#include <limits>

#include "tessera/base/dtype.hpp"
#include "tessera/base/error.hpp"

namespace tessera {
namespace {

bool f16_is_nan(std::uint16_t h) {
  return (h & 0x7C00) == 0x7C00 && (h & 0x3FF) != 0;
}
bool bf16_is_nan(std::uint16_t b) {
  return (b & 0x7F80) == 0x7F80 && (b & 0x7F) != 0;
}

TEST(DTypeConversion, F16KnownValuesDecode) {
  EXPECT_EQ(f16_to_float(0x3C00), 1.0F);
  EXPECT_EQ(f16_to_float(0xC000), -2.0F);
  EXPECT_EQ(f16_to_float(0x7BFF), 65504.0F);
  EXPECT_EQ(f16_to_float(0x0001), std::ldexp(1.0F, -24));  // smallest subnormal
  EXPECT_EQ(f16_to_float(0x0400), std::ldexp(1.0F, -14));  // smallest normal
  EXPECT_TRUE(std::isinf(f16_to_float(0x7C00)));
  EXPECT_TRUE(std::signbit(f16_to_float(0x8000)));
  EXPECT_TRUE(std::isnan(f16_to_float(0x7E00)));
}

TEST(DTypeConversion, EveryF16ValueRoundTripsThroughFloat) {
  for (std::uint32_t bits = 0; bits <= 0xFFFF; ++bits) {
    const auto h = static_cast<std::uint16_t>(bits);
    if (f16_is_nan(h)) {
      EXPECT_TRUE(f16_is_nan(float_to_f16(f16_to_float(h)))) << std::hex << bits;
    } else {
      ASSERT_EQ(float_to_f16(f16_to_float(h)), h) << std::hex << bits;
    }
  }
}

// Halfway between two neighbours the even one wins; just off halfway the nearer one does.
TEST(DTypeConversion, F16RoundsToNearestEven) {
  for (std::uint16_t low = 0; low < 0x7BFF; ++low) {
    const auto high = static_cast<std::uint16_t>(low + 1);
    const float a = f16_to_float(low);
    const float b = f16_to_float(high);
    const float middle = (a + b) / 2;  // exact: float has 13 more mantissa bits
    ASSERT_EQ(float_to_f16(middle), (low & 1) == 0 ? low : high) << std::hex << low;
    ASSERT_EQ(float_to_f16(std::nextafter(middle, a)), low) << std::hex << low;
    ASSERT_EQ(float_to_f16(std::nextafter(middle, b)), high) << std::hex << low;
  }
}

TEST(DTypeConversion, F16OverflowsToInfinityAtHalfwayPastTheLargestValue) {
  EXPECT_EQ(float_to_f16(65519.0F), 0x7BFF);
  EXPECT_EQ(float_to_f16(65520.0F), 0x7C00);
  EXPECT_EQ(float_to_f16(-1e30F), 0xFC00);
  EXPECT_EQ(float_to_f16(std::numeric_limits<float>::infinity()), 0x7C00);
  EXPECT_TRUE(f16_is_nan(float_to_f16(std::numeric_limits<float>::quiet_NaN())));
  EXPECT_EQ(float_to_f16(std::ldexp(1.0F, -26)), 0x0000);  // below half the smallest subnormal
}

TEST(DTypeConversion, EveryBf16ValueRoundTripsThroughFloat) {
  for (std::uint32_t bits = 0; bits <= 0xFFFF; ++bits) {
    const auto b = static_cast<std::uint16_t>(bits);
    if (bf16_is_nan(b)) {
      EXPECT_TRUE(bf16_is_nan(float_to_bf16(bf16_to_float(b)))) << std::hex << bits;
    } else {
      ASSERT_EQ(float_to_bf16(bf16_to_float(b)), b) << std::hex << bits;
    }
  }
}

TEST(DTypeConversion, Bf16RoundsToNearestEven) {
  for (std::uint16_t low = 0; low < 0x7F7F; ++low) {
    const auto high = static_cast<std::uint16_t>(low + 1);
    const float a = bf16_to_float(low);
    const float b = bf16_to_float(high);
    const float middle = std::bit_cast<float>((std::bit_cast<std::uint32_t>(a) + 0x8000));
    ASSERT_EQ(float_to_bf16(middle), (low & 1) == 0 ? low : high) << std::hex << low;
    ASSERT_EQ(float_to_bf16(std::nextafter(middle, a)), low) << std::hex << low;
    ASSERT_EQ(float_to_bf16(std::nextafter(middle, b)), high) << std::hex << low;
  }
  EXPECT_EQ(float_to_bf16(3.0e38F * 10.0F), 0x7F80);  // infinity stays infinity
  EXPECT_TRUE(bf16_is_nan(float_to_bf16(std::numeric_limits<float>::quiet_NaN())));
  // A NaN whose payload sits only in the low bits must not truncate to infinity.
  EXPECT_TRUE(bf16_is_nan(float_to_bf16(std::bit_cast<float>(0x7F800001U))));
}

TEST(DTypeNames, ParseAcceptsCanonicalNamesAndCommonSpellings) {
  for (DType t : kAllDTypes) EXPECT_EQ(parse_dtype(dtype_name(t)), t);
  EXPECT_EQ(parse_dtype("float32"), DType::f32);
  EXPECT_EQ(parse_dtype("bfloat16"), DType::bf16);
  EXPECT_EQ(parse_dtype("half"), DType::f16);
  EXPECT_THROW((void)parse_dtype("f8"), InvalidArgument);
  EXPECT_EQ(dtype_size(DType::bf16), 2U);
  EXPECT_EQ(dtype_size(DType::i64), 8U);
}

}  // namespace
}  // namespace tessera
