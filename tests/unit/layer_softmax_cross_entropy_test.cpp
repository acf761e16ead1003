#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>

#include "layer_test_support.hpp"
#include "layers/softmax_cross_entropy.hpp"

namespace tessera::layers {
namespace {

using tessera::testing::copy_of;
using tessera::testing::expect_gradient_matches;
using tessera::testing::random_tensor;

Tensor targets_of(std::initializer_list<std::int64_t> values) {
  Tensor t({values.size()}, DType::i64);
  std::copy(values.begin(), values.end(), t.as<std::int64_t>().begin());
  return t;
}

const ComputeContext kSerial(1);

TEST(SoftmaxCrossEntropy, MatchesTheTextbookFormulaAndCountsCorrectRows) {
  Tensor logits({2, 3}, DType::f32);
  const float z[] = {1.0F, 2.0F, 3.0F, 0.5F, 0.0F, -1.0F};
  std::copy(std::begin(z), std::end(z), logits.as<float>().begin());
  const LossResult r = softmax_cross_entropy(logits, targets_of({2, 1}), 3, kSerial);
  const double row0 = std::log(std::exp(1.0) + std::exp(2.0) + std::exp(3.0)) - 3.0;
  const double row1 = std::log(std::exp(0.5) + std::exp(0.0) + std::exp(-1.0)) - 0.0;
  EXPECT_NEAR(r.mean(), (row0 + row1) / 2.0, 1e-6);
  EXPECT_EQ(r.correct, 1U);  // row 0 picks class 2 (right), row 1 picks class 0 (wrong)
}

TEST(SoftmaxCrossEntropy, StaysFiniteForHugeLogits) {
  Tensor logits({1, 3}, DType::f32);
  logits.as<float>()[0] = 1e30F;
  logits.as<float>()[1] = -1e30F;
  logits.as<float>()[2] = 0.0F;
  const LossResult r = softmax_cross_entropy(logits, targets_of({0}), 3, kSerial);
  EXPECT_TRUE(std::isfinite(r.mean()));
  EXPECT_NEAR(r.mean(), 0.0, 1e-12);
  for (const float g : r.grad_logits.as<float>()) EXPECT_TRUE(std::isfinite(g));
}

TEST(SoftmaxCrossEntropy, GradientMatchesFiniteDifferences) {
  Tensor logits = random_tensor({4, 5}, 21, 2.0F);
  const Tensor targets = targets_of({0, 4, 2, 2});
  const Tensor grad = copy_of(softmax_cross_entropy(logits, targets, 5, kSerial).grad_logits);
  auto f = [&] { return softmax_cross_entropy(logits, targets, 5, kSerial).mean(); };
  expect_gradient_matches(logits.as<float>(), grad.as<float>(), f, 1e-2F, 1e-2);
}

TEST(SoftmaxCrossEntropy, RejectsATargetOutsideTheClasses) {
  const Tensor logits = random_tensor({1, 3}, 22);
  EXPECT_THROW((void)softmax_cross_entropy(logits, targets_of({3}), 3, kSerial), InvalidArgument);
}

TEST(SoftmaxCrossEntropy, EmptyBatchGivesZeroLoss) {
  const Tensor logits({0, 3}, DType::f32);
  const Tensor targets({0}, DType::i64);
  const LossResult r = softmax_cross_entropy(logits, targets, 3, kSerial);
  EXPECT_EQ(r.mean(), 0.0);
  EXPECT_EQ(r.correct, 0U);
  EXPECT_EQ(r.grad_logits.count(), 0U);
}

// A language model's logits [n, T, classes] with targets [n, T]: one row per token, the mean
// over the counted tokens, ignored ones adding nothing; odd sizes on purpose (3 x 5 x 7).
TEST(SoftmaxCrossEntropy, TokenTargetsCountPerTokenAndIgnoredOnesAddNothing) {
  const Tensor logits = random_tensor({3, 5, 7}, 23, 2.0F);
  Tensor targets({3, 5}, DType::i64);
  auto t = targets.as<std::int64_t>();
  for (std::size_t i = 0; i < t.size(); ++i) t[i] = static_cast<std::int64_t>((i * 4) % 7);
  t[2] = kIgnoreTarget;
  t[11] = kIgnoreTarget;
  const LossResult r = softmax_cross_entropy(logits, targets, 7, kSerial);
  EXPECT_EQ(r.targets, 13U);
  EXPECT_EQ(r.grad_logits.shape(), (Shape{3, 5, 7}));
  const auto z = logits.as<float>();
  const auto g = r.grad_logits.as<float>();
  double expected = 0.0;
  std::size_t correct = 0;
  for (std::size_t row = 0; row < 15; ++row) {
    if (t[row] == kIgnoreTarget) {
      for (std::size_t c = 0; c < 7; ++c) EXPECT_EQ(g[row * 7 + c], 0.0F) << "ignored row " << row;
      continue;
    }
    double sum = 0.0;
    std::size_t arg_max = 0;
    for (std::size_t c = 0; c < 7; ++c) {
      sum += std::exp(static_cast<double>(z[row * 7 + c]));
      if (z[row * 7 + c] > z[row * 7 + arg_max]) arg_max = c;
    }
    const auto target = static_cast<std::size_t>(t[row]);
    expected += std::log(sum) - z[row * 7 + target];
    correct += arg_max == target ? 1 : 0;
    // (softmax - onehot) / 13 on a counted row.
    const double p = std::exp(static_cast<double>(z[row * 7 + target])) / sum;
    EXPECT_NEAR(g[row * 7 + target], (p - 1.0) / 13.0, 1e-6);
  }
  // The exponentials are float (as PyTorch's are), summed and logged in double: a few parts in
  // 1e9 of the double-precision sum, far below float's 6e-8.
  EXPECT_NEAR(r.loss_sum, expected, 1e-8 * expected);
  EXPECT_NEAR(r.mean(), expected / 13.0, 1e-8);
  EXPECT_EQ(r.correct, correct);
}

TEST(SoftmaxCrossEntropy, FarBelowTheMaximumIsProbabilityZeroAndANanLogitMakesTheLossNan) {
  // 40 classes: past the kernel's 16-lane blocks and with a tail, so each loop sees the values.
  Tensor logits({2, 40}, DType::f32);
  auto z = logits.as<float>();
  for (std::size_t c = 0; c < 40; ++c) z[c] = z[40 + c] = -300.0F;
  z[17] = 0.0F;                // row 0: one class holds all the mass; the others are e^-300 away
  z[40 + 33] = std::nanf("");  // row 1: a NaN must reach the loss (the trainer stops on it)
  const LossResult r = softmax_cross_entropy(logits, targets_of({17, 5}), 40, kSerial);
  const auto g = r.grad_logits.as<float>();
  EXPECT_TRUE(std::isnan(r.loss_sum)) << "row 1's NaN logit";
  EXPECT_EQ(g[17], 0.0F) << "p = 1 at the target: (1 - 1) / 2";
  for (std::size_t c = 0; c < 40; ++c) {
    if (c == 17) continue;
    EXPECT_EQ(g[c], 0.0F) << "class " << c << " is e^-300 below the maximum";
  }
  Tensor first_row({1, 40}, DType::f32);
  std::copy_n(z.data(), 40, first_row.as<float>().data());
  EXPECT_EQ(softmax_cross_entropy(first_row, targets_of({17}), 40, kSerial).loss_sum, 0.0)
      << "log(1 + 39 e^-300) is 0 in any precision";
}

TEST(SoftmaxCrossEntropy, NoCountedTargetGivesZeroLossAndAZeroGradient) {
  const Tensor logits = random_tensor({2, 3}, 24);
  const LossResult r =
      softmax_cross_entropy(logits, targets_of({kIgnoreTarget, kIgnoreTarget}), 3, kSerial);
  EXPECT_EQ(r.targets, 0U);
  EXPECT_EQ(r.mean(), 0.0);
  for (const float g : r.grad_logits.as<float>()) EXPECT_EQ(g, 0.0F);
}

TEST(SoftmaxCrossEntropy, RejectsTargetsThatAreNotOnePerRowOfLogits) {
  const Tensor logits = random_tensor({2, 3, 4}, 25);
  EXPECT_THROW((void)softmax_cross_entropy(logits, targets_of({0, 1}), 4, kSerial),
               InvalidArgument);
  EXPECT_THROW((void)softmax_cross_entropy(logits, targets_of({0, 1, 2, 3, 0, 1}), 3, kSerial),
               InvalidArgument);  // the last dimension is not `classes`
}

}  // namespace
}  // namespace tessera::layers
