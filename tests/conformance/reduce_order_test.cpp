// The fixed rank order, acc = ((x0 + x1) + x2) + ..., on data whose float sum depends on the
// order: values spread over 2^-20 .. 2^20, so that a transport adding in another order (a ring
// starting at another rank, a tree, pairwise halves) gives other bits. Each test first checks
// that its data really tells the orders apart, so it cannot pass by being insensitive.

#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <vector>

#include "world.hpp"

namespace tessera::conformance {
namespace {

std::uint64_t mix(std::uint64_t x) {
  x += 0x9E3779B97F4A7C15ULL;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ULL;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBULL;
  return x ^ (x >> 31);
}

// Random sign, 24 random mantissa bits and an exponent in [-20, 20].
float spread_value(int rank, std::size_t i) {
  const std::uint64_t bits = mix((static_cast<std::uint64_t>(rank) << 32) ^ i);
  const auto mantissa = static_cast<float>(bits & 0xFFFFFF) / 16777216.0F + 0.5F;
  const int exponent = static_cast<int>((bits >> 24) % 41) - 20;
  const float sign = ((bits >> 40) & 1) != 0 ? -1.0F : 1.0F;
  return sign * std::ldexp(mantissa, exponent);
}

std::vector<std::vector<float>> spread_inputs(int size, std::size_t count) {
  std::vector<std::vector<float>> inputs(static_cast<std::size_t>(size), std::vector<float>(count));
  for (int r = 0; r < size; ++r)
    for (std::size_t i = 0; i < count; ++i)
      inputs[static_cast<std::size_t>(r)][i] = spread_value(r, i);
  return inputs;
}

// The rank-order sum of element i, and the same sum in `order` (a permutation of ranks).
float sum_in_order(const std::vector<std::vector<float>>& inputs, const std::vector<int>& order,
                   std::size_t i) {
  float acc = inputs[static_cast<std::size_t>(order[0])][i];
  for (std::size_t k = 1; k < order.size(); ++k)
    acc += inputs[static_cast<std::size_t>(order[k])][i];
  return acc;
}

class ReduceOrder : public ::testing::TestWithParam<WorldParam> {
 protected:
  void SetUp() override {
    if (const auto why = unavailable(GetParam().transport, GetParam().size)) GTEST_SKIP() << *why;
  }
};

TEST_P(ReduceOrder, AllReduceAndReduceScatterSumInRankOrderWhereOrderChangesTheBits) {
  const int size = GetParam().size;
  if (size < 3) GTEST_SKIP() << "two ranks add in one order only (a + b == b + a)";
  constexpr std::size_t kCount = 3 * 4099;
  const auto inputs = spread_inputs(size, kCount);
  std::vector<int> rank_order(static_cast<std::size_t>(size));
  for (int r = 0; r < size; ++r) rank_order[static_cast<std::size_t>(r)] = r;
  std::vector<float> expected(kCount);
  for (std::size_t i = 0; i < kCount; ++i) expected[i] = sum_in_order(inputs, rank_order, i);

  // Every rotation of the rank order (a ring starting elsewhere) and the reverse must differ
  // from the rank order on many elements, or this data proves nothing.
  for (int start = 1; start <= size; ++start) {
    std::vector<int> other(static_cast<std::size_t>(size));
    for (int k = 0; k < size; ++k)
      other[static_cast<std::size_t>(k)] = start == size ? size - 1 - k : (start + k) % size;
    std::size_t differ = 0;
    for (std::size_t i = 0; i < kCount; ++i)
      differ += sum_in_order(inputs, other, i) != expected[i];
    ASSERT_GT(differ, kCount / 50) << "the test data does not tell rank orders apart";
  }

  World world(GetParam().transport, size);
  auto data = inputs;
  std::vector<std::shared_ptr<Work>> works;
  for (int r = 0; r < size; ++r) {
    auto& mine = data[static_cast<std::size_t>(r)];
    works.push_back(
        world.rank(r).all_reduce({mine.data(), kCount, DType::f32, Device::cpu()}, ReduceOp::sum));
  }
  wait_all(works);
  for (int r = 0; r < size; ++r) {
    const auto& mine = data[static_cast<std::size_t>(r)];
    for (std::size_t i = 0; i < kCount; ++i) {
      ASSERT_EQ(mine[i], expected[i]) << "all_reduce: rank " << r << " element " << i;
    }
  }

  const std::size_t block = kCount / static_cast<std::size_t>(size);
  std::vector<std::vector<float>> outputs(static_cast<std::size_t>(size),
                                          std::vector<float>(block));
  auto inputs_copy = inputs;
  works.clear();
  for (int r = 0; r < size; ++r) {
    auto& in = inputs_copy[static_cast<std::size_t>(r)];
    auto& out = outputs[static_cast<std::size_t>(r)];
    works.push_back(world.rank(r).reduce_scatter(
        {in.data(), block * static_cast<std::size_t>(size), DType::f32, Device::cpu()},
        {out.data(), block, DType::f32, Device::cpu()}, ReduceOp::sum));
  }
  wait_all(works);
  for (int r = 0; r < size; ++r) {
    for (std::size_t i = 0; i < block; ++i) {
      ASSERT_EQ(outputs[static_cast<std::size_t>(r)][i],
                expected[static_cast<std::size_t>(r) * block + i])
          << "reduce_scatter: rank " << r << " element " << i;
    }
  }
}

// avg is the rank-order sum divided once by the group size (not multiplied by 1/size, which
// rounds differently on about a third of these values).
TEST_P(ReduceOrder, AvgDividesTheRankOrderSumOnce) {
  const int size = GetParam().size;
  if (size < 3)
    GTEST_SKIP() << "1/2 is exact; the difference needs a size that is not a power of two";
  if ((size & (size - 1)) == 0) GTEST_SKIP() << "1/size is exact for a power of two";
  constexpr std::size_t kCount = 4099;
  const auto inputs = spread_inputs(size, kCount);
  std::vector<int> rank_order(static_cast<std::size_t>(size));
  for (int r = 0; r < size; ++r) rank_order[static_cast<std::size_t>(r)] = r;
  std::vector<float> expected(kCount);
  std::size_t differ = 0;
  const float n = static_cast<float>(size);
  for (std::size_t i = 0; i < kCount; ++i) {
    const float sum = sum_in_order(inputs, rank_order, i);
    expected[i] = sum / n;
    differ += expected[i] != sum * (1.0F / n);
  }
  ASSERT_GT(differ, kCount / 50) << "the test data does not tell x / n from x * (1 / n)";
  World world(GetParam().transport, size);
  auto data = inputs;
  std::vector<std::shared_ptr<Work>> works;
  for (int r = 0; r < size; ++r) {
    auto& mine = data[static_cast<std::size_t>(r)];
    works.push_back(
        world.rank(r).all_reduce({mine.data(), kCount, DType::f32, Device::cpu()}, ReduceOp::avg));
  }
  wait_all(works);
  for (int r = 0; r < size; ++r) {
    for (std::size_t i = 0; i < kCount; ++i) {
      ASSERT_EQ(data[static_cast<std::size_t>(r)][i], expected[i])
          << "rank " << r << " element " << i;
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Transports, ReduceOrder, ::testing::ValuesIn(every_transport_and_size()),
                         param_name);

}  // namespace
}  // namespace tessera::conformance
