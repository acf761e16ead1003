// The transformer kernels' Tensor forms on the host (layer_norm.hpp, gelu.hpp, embedding.hpp,
// causal_attention_tensors.hpp): the span kernels' bits, outputs of the documented shapes, and
// every argument of the wrong size or on another device refused by name before anything is read.
// Their GPU side is in cuda_transformer_layers_test.cpp.
#include <gtest/gtest.h>

#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "layer_test_support.hpp"
#include "layers/causal_attention_tensors.hpp"
#include "layers/embedding.hpp"
#include "layers/gelu.hpp"
#include "layers/layer_norm.hpp"
#include "tessera/base/error.hpp"
#include "tessera/base/random.hpp"

namespace tessera::layers {
namespace {

using testing::copy_of;
using testing::random_tensor;

bool same_bits(const Tensor& a, std::span<const float> b) {
  return a.count() == b.size() && std::memcmp(a.view().data, b.data(), b.size_bytes()) == 0;
}

// Runs `call`, which must throw InvalidArgument with `words` in its message.
template <class Call>
void expect_refused(const Call& call, const std::string& words) {
  try {
    call();
    ADD_FAILURE() << "accepted; expected a refusal saying \"" << words << "\"";
  } catch (const InvalidArgument& e) {
    EXPECT_NE(std::string(e.what()).find(words), std::string::npos) << e.what();
  }
}

class TensorForms : public ::testing::Test {
 protected:
  ComputeContext compute_{1};
};

TEST_F(TensorForms, LayerNormGivesTheSpanKernelsBits) {
  const std::size_t rows = 3 * 37;
  const std::size_t channels = 29;
  const Tensor x = random_tensor({3, 37, channels}, 1, 2.0F);
  const Tensor w = random_tensor({channels}, 2);
  const Tensor b = random_tensor({channels}, 3);
  const Tensor dy = random_tensor(x.shape(), 4);
  const LayerNormOutput out = layer_norm_forward(x, w.view(), b.view(), channels, compute_);
  EXPECT_EQ(out.output.shape(), x.shape());
  EXPECT_EQ(out.mean.shape(), (Shape{rows}));
  std::vector<float> y(rows * channels);
  std::vector<float> mean(rows);
  std::vector<float> rstd(rows);
  layer_norm_forward<float>(y, mean, rstd, x.as<float>(), w.as<float>(), b.as<float>(), rows,
                            channels, compute_);
  EXPECT_TRUE(same_bits(out.output, y));
  EXPECT_TRUE(same_bits(out.mean, mean));
  EXPECT_TRUE(same_bits(out.rstd, rstd));

  const Tensor dx = random_tensor(x.shape(), 5);
  const Tensor gw = random_tensor({channels}, 6);
  const Tensor gb = random_tensor({channels}, 7);
  std::vector<float> dx_span(dx.as<float>().begin(), dx.as<float>().end());
  std::vector<float> gw_span(gw.as<float>().begin(), gw.as<float>().end());
  std::vector<float> gb_span(gb.as<float>().begin(), gb.as<float>().end());
  layer_norm_backward(dx, gw.view(), gb.view(), dy, x, w.view(), out.mean, out.rstd, channels,
                      compute_);
  layer_norm_backward<float>(dx_span, gw_span, gb_span, dy.as<float>(), x.as<float>(),
                             w.as<float>(), mean, rstd, rows, channels, compute_);
  EXPECT_TRUE(same_bits(dx, dx_span));
  EXPECT_TRUE(same_bits(gw, gw_span));
  EXPECT_TRUE(same_bits(gb, gb_span));
}

TEST_F(TensorForms, GeluGivesTheSpanKernelsBitsAndItsBackwardAdds) {
  const Tensor x = random_tensor({70, 33}, 1, 4.0F);
  const Tensor dy = random_tensor(x.shape(), 2);
  const Tensor y = gelu_forward(x, compute_);
  EXPECT_EQ(y.shape(), x.shape());
  std::vector<float> expected(x.count());
  gelu_forward<float>(expected, x.as<float>(), compute_);
  EXPECT_TRUE(same_bits(y, expected));
  const Tensor dx = random_tensor(x.shape(), 3);
  std::vector<float> dx_span(dx.as<float>().begin(), dx.as<float>().end());
  gelu_backward(dx, dy, x, compute_);
  gelu_backward<float>(dx_span, dy.as<float>(), x.as<float>(), compute_);
  EXPECT_TRUE(same_bits(dx, dx_span));
}

TEST_F(TensorForms, EmbeddingGivesTheSpanKernelsBits) {
  const EmbeddingShape shape{3, 37, 29, 11, 40};
  Tensor tokens({3, 37}, DType::i64);
  for (std::size_t i = 0; i < tokens.count(); ++i) {
    tokens.as<std::int64_t>()[i] = static_cast<std::int64_t>(counter_random(1, 3, i) % 11);
  }
  const Tensor wte = random_tensor({11, 29}, 2);
  const Tensor wpe = random_tensor({40, 29}, 3);
  const Tensor out = embedding_forward(tokens, wte.view(), wpe.view(), shape, compute_);
  EXPECT_EQ(out.shape(), (Shape{3, 37, 29}));
  std::vector<float> expected(out.count());
  embedding_forward<float>(expected, tokens.as<std::int64_t>(), wte.as<float>(), wpe.as<float>(),
                           shape, compute_);
  EXPECT_TRUE(same_bits(out, expected));
  const Tensor dy = random_tensor(out.shape(), 4);
  const Tensor gw = random_tensor(wte.shape(), 5);
  const Tensor gp = random_tensor(wpe.shape(), 6);
  std::vector<float> gw_span(gw.as<float>().begin(), gw.as<float>().end());
  std::vector<float> gp_span(gp.as<float>().begin(), gp.as<float>().end());
  embedding_backward(gw.view(), gp.view(), dy, tokens, shape, compute_);
  embedding_backward<float>(gw_span, gp_span, dy.as<float>(), tokens.as<std::int64_t>(), shape,
                            compute_);
  EXPECT_TRUE(same_bits(gw, gw_span));
  EXPECT_TRUE(same_bits(gp, gp_span));
}

TEST_F(TensorForms, CausalAttentionGivesTheSpanKernelsBits) {
  const AttentionShape shape{2, 37, 3, 5};
  const std::size_t tokens = 2 * 37;
  const Tensor qkv = random_tensor({2, 37, 45}, 1);
  const AttentionOutput out = causal_attention_forward(qkv, shape, compute_);
  EXPECT_EQ(out.output.shape(), (Shape{2, 37, 15}));
  EXPECT_EQ(out.log_sum_exp.shape(), (Shape{2, 3, 37}));
  std::vector<float> o(tokens * 15);
  std::vector<float> lse(tokens * 3);
  causal_attention_forward<float>(o, lse, qkv.as<float>(), shape, compute_);
  EXPECT_TRUE(same_bits(out.output, o));
  EXPECT_TRUE(same_bits(out.log_sum_exp, lse));
  const Tensor dout = random_tensor(out.output.shape(), 2);
  const Tensor grad = random_tensor(qkv.shape(), 3);
  std::vector<float> grad_span(grad.as<float>().begin(), grad.as<float>().end());
  causal_attention_backward(grad, dout, qkv, out.output, out.log_sum_exp, shape, compute_);
  causal_attention_backward<float>(grad_span, dout.as<float>(), qkv.as<float>(), o, lse, shape,
                                   compute_);
  EXPECT_TRUE(same_bits(grad, grad_span));
}

TEST_F(TensorForms, EachRefusesAnArgumentOfTheWrongSizeNamingIt) {
  const Tensor x = random_tensor({4, 29}, 1);
  const Tensor w = random_tensor({29}, 2);
  const Tensor short_w = random_tensor({28}, 3);
  expect_refused([&] { (void)layer_norm_forward(x, short_w.view(), w.view(), 29, compute_); },
                 "layer_norm: weight has 28 f32 elements, expected 29");
  const LayerNormOutput n = layer_norm_forward(x, w.view(), w.view(), 29, compute_);
  expect_refused(
      [&] {
        layer_norm_backward(x, w.view(), w.view(), random_tensor({4, 28}, 4), x, w.view(), n.mean,
                            n.rstd, 29, compute_);
      },
      "layer_norm: grad_output has 112 f32 elements, expected 116");
  expect_refused([&] { gelu_backward(random_tensor({5}, 5), x, x, compute_); },
                 "gelu: grad_input has 5 f32 elements, expected 116");
  const AttentionShape shape{1, 4, 3, 5};
  const Tensor qkv = random_tensor({1, 4, 45}, 6);
  const AttentionOutput a = causal_attention_forward(qkv, shape, compute_);
  expect_refused(
      [&] {
        causal_attention_backward(random_tensor({1, 4, 45}, 7), a.output, qkv, a.output,
                                  random_tensor({1, 3, 3}, 8), shape, compute_);
      },
      "causal_attention: log_sum_exp has 9 f32 elements, expected 12");
  expect_refused(
      [&] {
        (void)causal_attention_forward(qkv, AttentionShape{1, 5, 3, 5}, compute_);
      },
      "causal_attention: qkv has 180 f32 elements, expected 225");
  const EmbeddingShape e{1, 4, 29, 5, 4};
  Tensor tokens({1, 4}, DType::i64);
  expect_refused(
      [&] {
        (void)embedding_forward(tokens, random_tensor({4, 29}, 9).view(),
                                random_tensor({4, 29}, 10).view(), e, compute_);
      },
      "embedding: token table has 116 f32 elements, expected 145");
  expect_refused(
      [&] {
        (void)embedding_forward(Tensor({1, 3}, DType::i64), random_tensor({5, 29}, 9).view(),
                                random_tensor({4, 29}, 10).view(), e, compute_);
      },
      "embedding: tokens has 3 elements, expected 4");
}

TEST_F(TensorForms, EachRefusesAnArgumentOnAnotherDeviceThanTheInput) {
  // Memory that says it is on cuda:7: the device check refuses it before anything reads it.
  const auto elsewhere = std::make_shared<testing::UnseenDevice>(7);
  const Tensor x = random_tensor({4, 29}, 1);
  const Tensor w = random_tensor({29}, 2);
  const Tensor w_elsewhere = w.copy_to(elsewhere);
  expect_refused([&] { (void)layer_norm_forward(x, w.view(), w_elsewhere.view(), 29, compute_); },
                 "layer_norm: bias is on cuda:7 but the kernel computes on cpu");
  expect_refused([&] { gelu_backward(x.copy_to(elsewhere), x, x, compute_); },
                 "gelu: grad_input is on cuda:7 but the kernel computes on cpu");
  const AttentionShape shape{1, 4, 3, 5};
  const Tensor qkv = random_tensor({1, 4, 45}, 3);
  const AttentionOutput a = causal_attention_forward(qkv, shape, compute_);
  expect_refused(
      [&] {
        causal_attention_backward(random_tensor({1, 4, 45}, 4), a.output.copy_to(elsewhere), qkv,
                                  a.output, a.log_sum_exp, shape, compute_);
      },
      "causal_attention: grad_output is on cuda:7 but the kernel computes on cpu");
}

}  // namespace
}  // namespace tessera::layers
