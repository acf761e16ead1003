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

TEST(SyntheticDataset, TokenWindowsHaveTheNextTokensAsTargetsAndEveryIdInRange) {
  SyntheticConfig config{100, 10, 1, 5, 3};
  config.context = 8;
  const SyntheticDataset data(config);
  const SampleLayout layout = data.layout();
  EXPECT_EQ(layout.input_dtype, DType::i64);
  EXPECT_EQ(layout.input_shape, Shape{8});
  EXPECT_EQ(layout.target_shape, Shape{8});
  EXPECT_EQ(layout.classes, 5U);
  const std::vector<std::size_t> consecutive{41, 42};
  const Batch b = data.gather(Split::train, consecutive);
  ASSERT_EQ(b.inputs.shape(), (Shape{2, 8}));
  ASSERT_EQ(b.targets.shape(), (Shape{2, 8}));
  const auto x = b.inputs.as<std::int64_t>();
  const auto y = b.targets.as<std::int64_t>();
  for (std::size_t t = 0; t + 1 < 8; ++t) EXPECT_EQ(y[t], x[t + 1]) << "position " << t;
  EXPECT_EQ(y[7], x[8]) << "window 41 ends where window 42 starts";
  std::vector<int> counts(5);
  std::vector<std::size_t> all(100);
  for (std::size_t i = 0; i < all.size(); ++i) all[i] = i;
  const Batch whole = data.gather(Split::train, all);
  for (const auto id : whole.inputs.as<std::int64_t>()) {
    ASSERT_GE(id, 0);
    ASSERT_LT(id, 5);
    ++counts[static_cast<std::size_t>(id)];
  }
  for (const int c : counts) EXPECT_GT(c, 100) << "800 uniform ids over 5 values";
  const std::vector<std::size_t> first{0};
  const Batch train = data.gather(Split::train, first);
  const Batch test = data.gather(Split::test, first);
  EXPECT_NE(std::memcmp(train.inputs.view().data, test.inputs.view().data, train.inputs.bytes()),
            0);
  EXPECT_THROW((void)data.gather(Split::test, std::vector<std::size_t>{10}), InvalidArgument);
}

}  // namespace
}  // namespace tessera::synthetic
