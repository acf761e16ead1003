#include "tessera/base/tensor.hpp"

#include <gtest/gtest.h>

#include <cstdint>

#include "tessera/base/error.hpp"

namespace tessera {
namespace {

TEST(Tensor, StorageIsZeroedAndCacheLineAligned) {
  Tensor t({3, 5}, DType::f32);
  EXPECT_EQ(t.count(), 15U);
  EXPECT_EQ(t.bytes(), 60U);
  EXPECT_EQ(reinterpret_cast<std::uintptr_t>(t.view().data) % 64, 0U);
  for (float v : t.as<float>()) EXPECT_EQ(v, 0.0F);
}

TEST(Tensor, TypedAccessWithTheWrongTypeIsRefused) {
  Tensor t({4}, DType::i64);
  EXPECT_NO_THROW((void)t.as<std::int64_t>());
  EXPECT_THROW((void)t.as<float>(), InvalidArgument);
}

TEST(Tensor, ViewSliceAddressesElementsNotBytes) {
  Tensor t({8}, DType::f64);
  auto values = t.as<double>();
  for (std::size_t i = 0; i < values.size(); ++i) values[i] = static_cast<double>(i);
  const BufferView tail = t.view().slice(5, 3);
  EXPECT_EQ(tail.count, 3U);
  EXPECT_EQ(static_cast<double*>(tail.data)[0], 5.0);
  EXPECT_EQ(tail.bytes(), 24U);
}

TEST(Tensor, AnEmptyShapeHoldsOneScalarAndAZeroDimensionHoldsNothing) {
  EXPECT_EQ(element_count({}), 1U);
  EXPECT_EQ(element_count({4, 0, 2}), 0U);
  Tensor empty({0}, DType::u8);
  EXPECT_EQ(empty.count(), 0U);
}

}  // namespace
}  // namespace tessera
