#include <gtest/gtest.h>

#include <cstring>

#include "layer_test_support.hpp"
#include "layers/activation.hpp"

namespace tessera::layers {
namespace {

using tessera::testing::copy_of;
using tessera::testing::expect_gradient_matches;
using tessera::testing::random_tensor;

auto compute() {
  return std::make_shared<const ComputeContext>(1);
}

double weighted_sum(const Tensor& y, const Tensor& w) {
  double sum = 0.0;
  for (std::size_t i = 0; i < y.count(); ++i) sum += double{y.as<float>()[i]} * w.as<float>()[i];
  return sum;
}

TEST(Relu, ZeroesNegativesAndPassesPositives) {
  Activation relu("act", ActivationKind::relu, compute());
  Tensor x({1, 4}, DType::f32);
  const float in[] = {-2.0F, -0.0F, 0.5F, 3.0F};
  std::copy(std::begin(in), std::end(in), x.as<float>().begin());
  LayerContext ctx;
  const Tensor y = relu.forward(x, {}, ctx);
  EXPECT_EQ(y.as<float>()[0], 0.0F);
  EXPECT_EQ(y.as<float>()[1], 0.0F);
  EXPECT_EQ(y.as<float>()[2], 0.5F);
  EXPECT_EQ(y.as<float>()[3], 3.0F);
  Tensor dy({1, 4}, DType::f32);
  std::fill(dy.as<float>().begin(), dy.as<float>().end(), 1.0F);
  const Tensor dx = relu.backward(dy, {}, {}, ctx);
  EXPECT_EQ(dx.as<float>()[0], 0.0F);
  EXPECT_EQ(dx.as<float>()[2], 1.0F);
  EXPECT_EQ(dx.as<float>()[3], 1.0F);
}

TEST(Gelu, MatchesTheTanhApproximationAtKnownPoints) {
  Activation gelu("act", ActivationKind::gelu, compute());
  Tensor x({1, 3}, DType::f32);
  x.as<float>()[0] = -1.0F;
  x.as<float>()[1] = 0.0F;
  x.as<float>()[2] = 1.0F;
  LayerContext ctx;
  const Tensor y = gelu.forward(x, {}, ctx);
  // torch.nn.functional.gelu(torch.tensor([-1., 0., 1.]), approximate="tanh")
  EXPECT_NEAR(y.as<float>()[0], -0.158808F, 1e-6);
  EXPECT_EQ(y.as<float>()[1], 0.0F);
  EXPECT_NEAR(y.as<float>()[2], 0.841192F, 1e-6);
}

TEST(Gelu, BackwardMatchesFiniteDifferences) {
  Activation gelu("act", ActivationKind::gelu, compute());
  Tensor x = random_tensor({3, 7}, 11, 3.0F);
  const Tensor upstream = random_tensor({3, 7}, 12);
  auto f = [&] {
    LayerContext c;
    return weighted_sum(gelu.forward(x, {}, c), upstream);
  };
  LayerContext ctx;
  (void)gelu.forward(x, {}, ctx);
  const Tensor dx = copy_of(gelu.backward(upstream, {}, {}, ctx));
  expect_gradient_matches(x.as<float>(), dx.as<float>(), f, 1e-2F, 1e-2);
}

TEST(Activation, LargeTensorsComputeInParallelWithTheSameBits) {
  const Tensor x = random_tensor({64, 1024}, 13, 4.0F);
  for (const auto kind : {ActivationKind::relu, ActivationKind::gelu}) {
    Activation serial("act", kind, std::make_shared<const ComputeContext>(1));
    Activation parallel("act", kind, std::make_shared<const ComputeContext>(4));
    LayerContext a;
    LayerContext b;
    const Tensor ya = serial.forward(x, {}, a);
    const Tensor yb = parallel.forward(x, {}, b);
    EXPECT_EQ(std::memcmp(ya.view().data, yb.view().data, ya.bytes()), 0);
  }
}

TEST(Activation, ParsesItsNamesAndRejectsOthers) {
  EXPECT_EQ(parse_activation("relu"), ActivationKind::relu);
  EXPECT_EQ(parse_activation("gelu"), ActivationKind::gelu);
  EXPECT_THROW((void)parse_activation("tanh"), ConfigError);
}

}  // namespace
}  // namespace tessera::layers
