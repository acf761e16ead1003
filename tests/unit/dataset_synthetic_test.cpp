#include <gtest/gtest.h>

#include <cstring>

#include "synthetic/synthetic.hpp"
#include "tessera/base/error.hpp"

namespace tessera::synthetic {
namespace {

TEST(SyntheticDataset, IsTheSameForTheSameSeed) {
  const SyntheticDataset a(SyntheticConfig{100, 10, 8, 3, 5});
  const SyntheticDataset b(SyntheticConfig{100, 10, 8, 3, 5});
  const SyntheticDataset c(SyntheticConfig{100, 10, 8, 3, 6});
  const std::vector<std::size_t> indices{0, 42, 99};
  const Batch ba = a.gather(Split::train, indices);
  const Batch bb = b.gather(Split::train, indices);
  const Batch bc = c.gather(Split::train, indices);
  EXPECT_EQ(std::memcmp(ba.inputs.view().data, bb.inputs.view().data, ba.inputs.bytes()), 0);
  EXPECT_NE(std::memcmp(ba.inputs.view().data, bc.inputs.view().data, ba.inputs.bytes()), 0);
}

TEST(SyntheticDataset, UsesEveryClassAndHasAStandardNormalInput) {
  const SyntheticDataset data(SyntheticConfig{2000, 100, 16, 4, 1});
  EXPECT_EQ(data.size(Split::train), 2000U);
  EXPECT_EQ(data.size(Split::test), 100U);
  EXPECT_EQ(data.layout().input_shape, Shape{16});
  std::vector<std::size_t> all(2000);
  for (std::size_t i = 0; i < all.size(); ++i) all[i] = i;
  const Batch b = data.gather(Split::train, all);
  std::vector<int> counts(4);
  for (const auto y : b.targets.as<std::int64_t>()) ++counts.at(static_cast<std::size_t>(y));
  for (const int c : counts) EXPECT_GT(c, 200);
  double sum = 0.0;
  double square = 0.0;
  for (const float v : b.inputs.as<float>()) {
    sum += v;
    square += double{v} * v;
  }
  const double n = static_cast<double>(b.inputs.count());
  EXPECT_NEAR(sum / n, 0.0, 0.03);
  EXPECT_NEAR(square / n, 1.0, 0.05);
}

TEST(SyntheticDataset, RejectsAnIndexPastTheEnd) {
  const SyntheticDataset data(SyntheticConfig{10, 0, 4, 2, 0});
  const std::vector<std::size_t> bad{10};
  EXPECT_THROW((void)data.gather(Split::train, bad), InvalidArgument);
}

TEST(SyntheticDataset, RefusesAnEmptyTrainingSplitNamingTheOptionNotASourceFile) {
  try {
    const SyntheticDataset data(SyntheticConfig{0, 10, 4, 2, 0});
    FAIL() << "a synthetic data set with no training sample";
  } catch (const ConfigError& e) {
    const std::string what = e.what();
    EXPECT_EQ(what.rfind("[dataset.synthetic] samples = 0:", 0), 0U) << what;
    EXPECT_EQ(what.find(".cpp"), std::string::npos) << what;
  }
  EXPECT_THROW(SyntheticDataset(SyntheticConfig{10, 10, 0, 2, 0}), ConfigError);
  EXPECT_THROW(SyntheticDataset(SyntheticConfig{10, 10, 4, 1, 0}), ConfigError);
}

}  // namespace
}  // namespace tessera::synthetic
