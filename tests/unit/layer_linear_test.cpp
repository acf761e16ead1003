#include <gtest/gtest.h>

#include <cstring>

#include "layer_test_support.hpp"
#include "layers/linear.hpp"

namespace tessera::layers {
namespace {

using tessera::testing::copy_of;
using tessera::testing::expect_gradient_matches;
using tessera::testing::random_tensor;

class LinearTest : public ::testing::Test {
 protected:
  static constexpr std::size_t kIn = 5;
  static constexpr std::size_t kOut = 3;
  static constexpr std::size_t kRows = 4;
  std::shared_ptr<const ComputeContext> compute_ = std::make_shared<ComputeContext>(1);
  Linear linear_{"fc", kIn, kOut, compute_};
  Tensor weight_ = random_tensor({kOut, kIn}, 1);
  Tensor bias_ = random_tensor({kOut}, 2);
  Tensor weight_grad_ = Tensor({kOut, kIn}, DType::f32);
  Tensor bias_grad_ = Tensor({kOut}, DType::f32);
  std::vector<BufferView> params_{weight_.view(), bias_.view()};
  std::vector<BufferView> grads_{weight_grad_.view(), bias_grad_.view()};
};

TEST_F(LinearTest, DeclaresWeightAndBiasInPyTorchLayout) {
  const auto specs = linear_.parameters();
  ASSERT_EQ(specs.size(), 2U);
  EXPECT_EQ(specs[0].name, "fc.weight");
  EXPECT_EQ(specs[0].shape, (Shape{kOut, kIn}));
  EXPECT_EQ(specs[0].init, ParamInit::kaiming_uniform);
  EXPECT_EQ(specs[0].fan_in, kIn);
  EXPECT_EQ(specs[1].shape, (Shape{kOut}));
  EXPECT_EQ(specs[1].init, ParamInit::zeros);
}

TEST_F(LinearTest, ForwardComputesInputTimesWeightTransposedPlusBias) {
  const Tensor x = random_tensor({kRows, kIn}, 3);
  LayerContext ctx;
  const Tensor y = linear_.forward(x, params_, ctx);
  ASSERT_EQ(y.shape(), (Shape{kRows, kOut}));
  const auto xv = x.as<float>();
  const auto w = weight_.as<float>();
  const auto b = bias_.as<float>();
  for (std::size_t r = 0; r < kRows; ++r) {
    for (std::size_t o = 0; o < kOut; ++o) {
      double expected = b[o];
      for (std::size_t i = 0; i < kIn; ++i) expected += double{xv[r * kIn + i]} * w[o * kIn + i];
      EXPECT_NEAR(y.as<float>()[r * kOut + o], expected, 1e-5);
    }
  }
}

TEST_F(LinearTest, BackwardMatchesFiniteDifferences) {
  Tensor x = random_tensor({kRows, kIn}, 3);
  const Tensor upstream = random_tensor({kRows, kOut}, 4);
  // f = sum(upstream * forward(x)): its gradients are what backward computes from upstream.
  auto f = [&] {
    LayerContext c;
    const Tensor y = linear_.forward(x, params_, c);
    double sum = 0.0;
    for (std::size_t i = 0; i < y.count(); ++i)
      sum += double{y.as<float>()[i]} * upstream.as<float>()[i];
    return sum;
  };
  LayerContext ctx;
  (void)linear_.forward(x, params_, ctx);
  const Tensor dx = linear_.backward(upstream, params_, grads_, ctx);
  const Tensor dx_copy = copy_of(dx);
  expect_gradient_matches(x.as<float>(), dx_copy.as<float>(), f);
  expect_gradient_matches(weight_.as<float>(), weight_grad_.as<float>(), f);
  expect_gradient_matches(bias_.as<float>(), bias_grad_.as<float>(), f);
}

TEST_F(LinearTest, BackwardAddsToExistingGradients) {
  const Tensor x = random_tensor({kRows, kIn}, 3);
  const Tensor upstream = random_tensor({kRows, kOut}, 4);
  LayerContext ctx;
  (void)linear_.forward(x, params_, ctx);
  (void)linear_.backward(upstream, params_, grads_, ctx);
  const Tensor once_w = copy_of(weight_grad_);
  const Tensor once_b = copy_of(bias_grad_);
  (void)linear_.backward(upstream, params_, grads_, ctx);
  for (std::size_t i = 0; i < once_w.count(); ++i) {
    EXPECT_FLOAT_EQ(weight_grad_.as<float>()[i], 2.0F * once_w.as<float>()[i]);
  }
  for (std::size_t i = 0; i < once_b.count(); ++i) {
    EXPECT_FLOAT_EQ(bias_grad_.as<float>()[i], 2.0F * once_b.as<float>()[i]);
  }
}

TEST_F(LinearTest, SkipsInputGradientWhenNobodyNeedsIt) {
  const Tensor x = random_tensor({kRows, kIn}, 3);
  LayerContext ctx;
  ctx.set_input_gradient_needed(false);
  (void)linear_.forward(x, params_, ctx);
  const Tensor dx = linear_.backward(random_tensor({kRows, kOut}, 4), params_, grads_, ctx);
  EXPECT_EQ(dx.count(), 0U);
  EXPECT_NE(bias_grad_.as<float>()[0], 0.0F);
}

TEST(LinearThreads, ManyThreadsGiveTheSameBitsAsOne) {
  constexpr std::size_t kWideIn = 300;
  constexpr std::size_t kWideOut = 200;
  constexpr std::size_t kBatch = 128;
  const Tensor x = random_tensor({kBatch, kWideIn}, 5);
  const Tensor w = random_tensor({kWideOut, kWideIn}, 6);
  const Tensor b = random_tensor({kWideOut}, 7);
  const Tensor dy = random_tensor({kBatch, kWideOut}, 8);
  auto run = [&](int threads) {
    Linear layer("fc", kWideIn, kWideOut, std::make_shared<ComputeContext>(threads));
    Tensor dw({kWideOut, kWideIn}, DType::f32);
    Tensor db({kWideOut}, DType::f32);
    const std::vector<BufferView> params{w.view(), b.view()};
    const std::vector<BufferView> grads{dw.view(), db.view()};
    LayerContext ctx;
    Tensor y = layer.forward(x, params, ctx);
    Tensor dx = layer.backward(dy, params, grads, ctx);
    std::vector<Tensor> out;
    out.push_back(std::move(y));
    out.push_back(std::move(dx));
    out.push_back(std::move(dw));
    out.push_back(std::move(db));
    return out;
  };
  const auto one = run(1);
  const auto four = run(4);
  for (std::size_t t = 0; t < one.size(); ++t) {
    ASSERT_EQ(one[t].bytes(), four[t].bytes());
    EXPECT_EQ(std::memcmp(one[t].view().data, four[t].view().data, one[t].bytes()), 0)
        << "tensor " << t;
  }
}

TEST_F(LinearTest, RejectsInputOfTheWrongWidth) {
  LayerContext ctx;
  EXPECT_THROW((void)linear_.forward(random_tensor({kRows, kIn + 1}, 3), params_, ctx),
               InvalidArgument);
}

}  // namespace
}  // namespace tessera::layers
