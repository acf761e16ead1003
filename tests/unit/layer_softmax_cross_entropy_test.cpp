#include <gtest/gtest.h>

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
  EXPECT_NEAR(r.loss, (row0 + row1) / 2.0, 1e-6);
  EXPECT_EQ(r.correct, 1U);  // row 0 picks class 2 (right), row 1 picks class 0 (wrong)
}

TEST(SoftmaxCrossEntropy, StaysFiniteForHugeLogits) {
  Tensor logits({1, 3}, DType::f32);
  logits.as<float>()[0] = 1e30F;
  logits.as<float>()[1] = -1e30F;
  logits.as<float>()[2] = 0.0F;
  const LossResult r = softmax_cross_entropy(logits, targets_of({0}), 3, kSerial);
  EXPECT_TRUE(std::isfinite(r.loss));
  EXPECT_NEAR(r.loss, 0.0, 1e-12);
  for (const float g : r.grad_logits.as<float>()) EXPECT_TRUE(std::isfinite(g));
}

TEST(SoftmaxCrossEntropy, GradientMatchesFiniteDifferences) {
  Tensor logits = random_tensor({4, 5}, 21, 2.0F);
  const Tensor targets = targets_of({0, 4, 2, 2});
  const Tensor grad = copy_of(softmax_cross_entropy(logits, targets, 5, kSerial).grad_logits);
  auto f = [&] { return softmax_cross_entropy(logits, targets, 5, kSerial).loss; };
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
  EXPECT_EQ(r.loss, 0.0);
  EXPECT_EQ(r.correct, 0U);
  EXPECT_EQ(r.grad_logits.count(), 0U);
}

}  // namespace
}  // namespace tessera::layers
