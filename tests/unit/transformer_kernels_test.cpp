// The transformer's span kernels (layers/layer_norm, gelu, embedding, causal_attention,
// vocab_cross_entropy): every backward against central finite differences of its forward, all
// in double, on small shapes chosen not to be round (time 7, 3 heads of size 5, batch 2,
// vocabulary 11); attention against a naive T x T implementation, with and without dropout on
// its probabilities (whose mask a slice of the heads or of the batch draws as the whole call
// does, keeping 1 - rate of them); the ignore index; the same bits at 1, 2 and 3 threads and in
// the baseline and AVX2 copies of the loops. Each backward's
// gradient buffers start at kPrior, not zero, so every check also asserts that backward adds
// into them.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <functional>
#include <limits>
#include <vector>

#include "layer_test_support.hpp"
#include "layers/causal_attention.hpp"
#include "layers/dropout.hpp"
#include "layers/embedding.hpp"
#include "layers/gelu.hpp"
#include "layers/layer_norm.hpp"
#include "layers/softmax_cross_entropy.hpp"
#include "layers/vocab_cross_entropy.hpp"
#include "tessera/base/error.hpp"
#include "tessera/base/random.hpp"

namespace tessera::layers {
namespace {

constexpr double kPrior = 0.25;      // what every gradient buffer holds before backward
constexpr double kStep = 1e-5;       // central differences: error ~ step^2, rounding ~ 1e-16/step
constexpr double kTolerance = 1e-7;  // relative to max(1, |numeric|)

template <class Real>
std::vector<Real> uniform(std::size_t n, std::uint64_t seed, double low = -1.0, double high = 1.0) {
  std::vector<Real> v(n);
  for (std::size_t i = 0; i < n; ++i) {
    v[i] = static_cast<Real>(low + (high - low) * counter_uniform(seed, 11, i));
  }
  return v;
}

std::vector<double> priors(std::size_t n) {
  return std::vector<double>(n, kPrior);
}

// sum_i weights[i] * values[i]: a scalar whose gradient with respect to `values` is `weights`,
// so backward with grad_output = weights must give the gradient of this scalar.
double weighted_sum(const std::vector<double>& values, const std::vector<double>& weights) {
  double sum = 0.0;
  for (std::size_t i = 0; i < values.size(); ++i) sum += values[i] * weights[i];
  return sum;
}

// Compares `accumulated` - kPrior with central differences of f over every element of
// `values`.
void expect_gradient(const char* what, std::vector<double>& values,
                     const std::vector<double>& accumulated, const std::function<double()>& f) {
  ASSERT_EQ(values.size(), accumulated.size()) << what;
  for (std::size_t i = 0; i < values.size(); ++i) {
    const double numeric = testing::central_difference(std::span<double>(values), i, f, kStep);
    EXPECT_NEAR(accumulated[i] - kPrior, numeric, kTolerance * std::max(1.0, std::abs(numeric)))
        << what << " element " << i;
  }
}

const ComputeContext& one_thread() {
  static const ComputeContext compute(1);
  return compute;
}

// ---- layer norm ----

TEST(LayerNormKernel, BackwardMatchesFiniteDifferences) {
  const std::size_t rows = 14;
  const std::size_t channels = 15;
  auto input = uniform<double>(rows * channels, 1, -2.0, 3.0);
  auto weight = uniform<double>(channels, 2, 0.5, 1.5);
  auto bias = uniform<double>(channels, 3);
  const auto weights = uniform<double>(rows * channels, 4);
  std::vector<double> output(rows * channels);
  std::vector<double> mean(rows);
  std::vector<double> rstd(rows);
  auto forward = [&] {
    layer_norm_forward<double>(output, mean, rstd, input, weight, bias, rows, channels,
                               one_thread());
    return weighted_sum(output, weights);
  };
  forward();
  auto grad_input = priors(input.size());
  auto grad_weight = priors(channels);
  auto grad_bias = priors(channels);
  layer_norm_backward<double>(grad_input, grad_weight, grad_bias, weights, input, weight, mean,
                              rstd, rows, channels, one_thread());
  expect_gradient("input", input, grad_input, forward);
  expect_gradient("weight", weight, grad_weight, forward);
  expect_gradient("bias", bias, grad_bias, forward);
}

TEST(LayerNormKernel, ForwardNormalisesEachRowAndSavesItsStatistics) {
  const std::size_t rows = 3;
  const std::size_t channels = 7;
  const auto input = uniform<double>(rows * channels, 5, 10.0, 14.0);  // mean far from 0
  const std::vector<double> weight(channels, 1.0);
  const std::vector<double> bias(channels, 0.0);
  std::vector<double> output(rows * channels);
  std::vector<double> mean(rows);
  std::vector<double> rstd(rows);
  layer_norm_forward<double>(output, mean, rstd, input, weight, bias, rows, channels, one_thread());
  for (std::size_t r = 0; r < rows; ++r) {
    double m = 0.0;
    for (std::size_t c = 0; c < channels; ++c) m += input[r * channels + c] / channels;
    double var = 0.0;
    for (std::size_t c = 0; c < channels; ++c) {
      var += (input[r * channels + c] - m) * (input[r * channels + c] - m) / channels;
    }
    EXPECT_NEAR(mean[r], m, 1e-12);
    EXPECT_NEAR(rstd[r], 1.0 / std::sqrt(var + kLayerNormEps), 1e-9);
    for (std::size_t c = 0; c < channels; ++c) {
      EXPECT_NEAR(output[r * channels + c], (input[r * channels + c] - m) * rstd[r], 1e-12);
    }
  }
}

// ---- GELU ----

TEST(GeluKernel, BackwardMatchesFiniteDifferences) {
  auto input = uniform<double>(23, 6, -4.0, 4.0);
  const auto weights = uniform<double>(input.size(), 7);
  std::vector<double> output(input.size());
  auto forward = [&] {
    gelu_forward<double>(output, input, one_thread());
    return weighted_sum(output, weights);
  };
  auto grad_input = priors(input.size());
  gelu_backward<double>(grad_input, weights, input, one_thread());
  expect_gradient("input", input, grad_input, forward);
}

TEST(GeluKernel, ForwardIsTheTanhApproximation) {
  // Values of PyTorch's F.gelu(x, approximate="tanh") in float64.
  const std::vector<double> input{-3.0, -0.5, 0.0, 1.0, 2.5};
  const std::vector<double> expected{-0.003637392081772994, -0.1542859901748561, 0.0,
                                     0.8411919906082768, 2.484915733910001};
  std::vector<double> output(input.size());
  gelu_forward<double>(output, input, one_thread());
  for (std::size_t i = 0; i < input.size(); ++i) EXPECT_NEAR(output[i], expected[i], 1e-12);
}

TEST(GeluKernel, FloatKernelsFollowTheDoubleFormulaToAFewFloatUlps) {
  // The float kernels compute tanh from a vectorised exp (kernel_support.hpp): every x from -12
  // to 12 in steps of 1/64 (both tails, tanh's small-argument region and 0), a tiny x, a NaN.
  std::vector<float> input;
  for (int i = -768; i <= 768; ++i) input.push_back(static_cast<float>(i) / 64.0F);
  input.push_back(1e-30F);
  input.push_back(std::nanf(""));
  std::vector<float> output(input.size());
  std::vector<float> grad(input.size(), 0.0F);
  const std::vector<float> ones(input.size(), 1.0F);
  gelu_forward<float>(output, input, one_thread());
  gelu_backward<float>(grad, ones, input, one_thread());
  for (std::size_t i = 0; i + 1 < input.size(); ++i) {
    const double x = input[i];
    const double y = gelu(x);
    const double dy = gelu_derivative(x);
    // Relative everywhere, in the tails too (1 + t and 1 - t^2 come without cancellation near
    // |t| = 1): float's rounding of the inner u moves e^(-2|u|) by about 2|u| x 6e-8, relative.
    // Where gelu' crosses 0 (x near -0.75) its two terms cancel, and below 1e-12 the double
    // reference is the worse one (its 1 + tanh and 1 - tanh^2 cancel to 0).
    const double two_u = 2.0 * 0.7978845608028654 * std::abs(x + 0.044715 * x * x * x);
    const double relative = 2e-7 * (2.0 + two_u);
    const double crossing = std::abs(x) < 2.0 ? 1e-7 : 0.0;
    EXPECT_NEAR(output[i], y, relative * std::abs(y) + 1e-12) << "gelu at " << x;
    EXPECT_NEAR(grad[i], dy, relative * std::abs(dy) + crossing + 1e-12) << "gelu' at " << x;
  }
  EXPECT_TRUE(std::isnan(output.back()));
  EXPECT_TRUE(std::isnan(grad.back()));
}

// ---- embedding ----

const EmbeddingShape kEmbedding{2, 7, 5, 11, 9};  // batch, time, channels, vocab, context

std::vector<std::int64_t> tokens_with_repeats() {
  // Token 4 appears three times, 0 and 10 (the vocabulary's ends) once each.
  return {4, 0, 7, 4, 2, 9, 1, 10, 3, 4, 6, 5, 8, 2};
}

TEST(EmbeddingKernel, ForwardAddsTokenAndPositionRows) {
  const auto tokens = tokens_with_repeats();
  const auto wte = uniform<double>(kEmbedding.vocab * kEmbedding.channels, 8);
  const auto wpe = uniform<double>(kEmbedding.context * kEmbedding.channels, 9);
  std::vector<double> output(tokens.size() * kEmbedding.channels);
  embedding_forward<double>(output, tokens, wte, wpe, kEmbedding, one_thread());
  const std::size_t c_count = kEmbedding.channels;
  for (std::size_t i = 0; i < tokens.size(); ++i) {
    const auto token = static_cast<std::size_t>(tokens[i]);
    const std::size_t position = i % kEmbedding.time;
    for (std::size_t c = 0; c < c_count; ++c) {
      EXPECT_EQ(output[i * c_count + c], wte[token * c_count + c] + wpe[position * c_count + c]);
    }
  }
}

TEST(EmbeddingKernel, BackwardMatchesFiniteDifferencesWithRepeatedTokens) {
  const auto tokens = tokens_with_repeats();
  auto wte = uniform<double>(kEmbedding.vocab * kEmbedding.channels, 10);
  auto wpe = uniform<double>(kEmbedding.context * kEmbedding.channels, 11);
  const auto weights = uniform<double>(tokens.size() * kEmbedding.channels, 12);
  std::vector<double> output(weights.size());
  auto forward = [&] {
    embedding_forward<double>(output, tokens, wte, wpe, kEmbedding, one_thread());
    return weighted_sum(output, weights);
  };
  auto grad_wte = priors(wte.size());
  auto grad_wpe = priors(wpe.size());  // positions 7 and 8 unused: their gradient stays kPrior
  embedding_backward<double>(grad_wte, grad_wpe, weights, tokens, kEmbedding, one_thread());
  expect_gradient("token table", wte, grad_wte, forward);
  expect_gradient("position table", wpe, grad_wpe, forward);
}

TEST(EmbeddingKernel, RefusesATokenOutsideTheVocabularyNamingItsPosition) {
  auto tokens = tokens_with_repeats();
  tokens[9] = 11;  // batch 1, position 2
  const auto wte = uniform<double>(kEmbedding.vocab * kEmbedding.channels, 8);
  const auto wpe = uniform<double>(kEmbedding.context * kEmbedding.channels, 9);
  std::vector<double> output(tokens.size() * kEmbedding.channels);
  try {
    embedding_forward<double>(output, tokens, wte, wpe, kEmbedding, one_thread());
    FAIL() << "expected InvalidArgument";
  } catch (const InvalidArgument& e) {
    EXPECT_NE(std::string(e.what()).find("token 11 at batch 1, position 2"), std::string::npos)
        << e.what();
  }
}

// ---- causal attention ----

const AttentionShape kAttention{2, 7, 3, 5};  // batch, time, heads, head_size

// Softmax(Q K^T * scale + causal mask) V with the whole T x T score matrix, in double: the
// textbook definition the online-softmax kernel must agree with. Also returns each row's
// log-sum-exp.
void naive_attention(const std::vector<double>& qkv, const AttentionShape& shape,
                     std::vector<double>& output, std::vector<double>& log_sum_exp) {
  const std::size_t c = shape.channels();
  const std::size_t t_count = shape.time;
  const double scale = 1.0 / std::sqrt(static_cast<double>(shape.head_size));
  output.assign(shape.batch * t_count * c, 0.0);
  log_sum_exp.assign(shape.batch * shape.heads * t_count, 0.0);
  std::vector<double> scores(t_count * t_count);
  for (std::size_t b = 0; b < shape.batch; ++b) {
    for (std::size_t h = 0; h < shape.heads; ++h) {
      auto at = [&](std::size_t t, std::size_t part, std::size_t d) {
        return qkv[(b * t_count + t) * 3 * c + part * c + h * shape.head_size + d];
      };
      for (std::size_t i = 0; i < t_count; ++i) {
        for (std::size_t j = 0; j < t_count; ++j) {
          double s = 0.0;
          for (std::size_t d = 0; d < shape.head_size; ++d) s += at(i, 0, d) * at(j, 1, d);
          scores[i * t_count + j] = j <= i ? s * scale : -std::numeric_limits<double>::infinity();
        }
        double row_max = scores[i * t_count];
        for (std::size_t j = 1; j <= i; ++j) row_max = std::max(row_max, scores[i * t_count + j]);
        double sum = 0.0;
        for (std::size_t j = 0; j < t_count; ++j)
          sum += std::exp(scores[i * t_count + j] - row_max);
        log_sum_exp[(b * shape.heads + h) * t_count + i] = row_max + std::log(sum);
        for (std::size_t j = 0; j < t_count; ++j) {
          const double p = std::exp(scores[i * t_count + j] - row_max) / sum;
          for (std::size_t d = 0; d < shape.head_size; ++d) {
            output[(b * t_count + i) * c + h * shape.head_size + d] += p * at(j, 2, d);
          }
        }
      }
    }
  }
}

std::size_t qkv_count(const AttentionShape& shape) {
  return shape.batch * shape.time * 3 * shape.channels();
}

TEST(CausalAttentionKernel, ForwardMatchesNaiveAttention) {
  const auto qkv = uniform<double>(qkv_count(kAttention), 13, -2.0, 2.0);
  std::vector<double> output(kAttention.batch * kAttention.time * kAttention.channels());
  std::vector<double> lse(kAttention.batch * kAttention.heads * kAttention.time);
  causal_attention_forward<double>(output, lse, qkv, kAttention, one_thread());
  std::vector<double> expected_output;
  std::vector<double> expected_lse;
  naive_attention(qkv, kAttention, expected_output, expected_lse);
  for (std::size_t i = 0; i < output.size(); ++i) {
    EXPECT_NEAR(output[i], expected_output[i], 1e-13) << "output " << i;
  }
  for (std::size_t i = 0; i < lse.size(); ++i) {
    EXPECT_NEAR(lse[i], expected_lse[i], 1e-13) << "log-sum-exp " << i;
  }
}

TEST(CausalAttentionKernel, FloatForwardStaysFiniteWhereNaiveExpOverflows) {
  // Scores up to about 40^2 * 5 / sqrt(5) = 3578: exp overflows float at 88.7, so only the
  // running-maximum shift keeps the result finite. Float against the double naive reference.
  const auto qkv = uniform<double>(qkv_count(kAttention), 14, -40.0, 40.0);
  const std::vector<float> qkv_float(qkv.begin(), qkv.end());
  std::vector<float> output(kAttention.batch * kAttention.time * kAttention.channels());
  std::vector<float> lse(kAttention.batch * kAttention.heads * kAttention.time);
  causal_attention_forward<float>(output, lse, qkv_float, kAttention, one_thread());
  std::vector<double> expected_output;
  std::vector<double> expected_lse;
  naive_attention(std::vector<double>(qkv_float.begin(), qkv_float.end()), kAttention,
                  expected_output, expected_lse);
  for (std::size_t i = 0; i < output.size(); ++i) {
    EXPECT_NEAR(output[i], expected_output[i], 1e-4 * 40.0) << "output " << i;
  }
  for (std::size_t i = 0; i < lse.size(); ++i) {
    EXPECT_NEAR(lse[i], expected_lse[i], 1e-6 * std::abs(expected_lse[i]) + 1e-5) << i;
  }
}

// Backward on kAttention against central differences of forward, both with `drop`.
void expect_attention_gradient(const AttentionDropout& drop) {
  auto qkv = uniform<double>(qkv_count(kAttention), 15, -2.0, 2.0);
  const std::size_t out_count = kAttention.batch * kAttention.time * kAttention.channels();
  const auto weights = uniform<double>(out_count, 16);
  std::vector<double> output(out_count);
  std::vector<double> lse(kAttention.batch * kAttention.heads * kAttention.time);
  auto forward = [&] {
    causal_attention_forward<double>(output, lse, qkv, kAttention, one_thread(), drop);
    return weighted_sum(output, weights);
  };
  forward();
  auto grad_qkv = priors(qkv.size());
  causal_attention_backward<double>(grad_qkv, weights, qkv, output, lse, kAttention, one_thread(),
                                    drop);
  expect_gradient("qkv", qkv, grad_qkv, forward);
}

TEST(CausalAttentionKernel, BackwardMatchesFiniteDifferences) {
  expect_attention_gradient({});
}

TEST(CausalAttentionKernel, LaterTokensDoNotChangeEarlierOutputs) {
  auto qkv = uniform<double>(qkv_count(kAttention), 17);
  const std::size_t out_count = kAttention.batch * kAttention.time * kAttention.channels();
  std::vector<double> before(out_count);
  std::vector<double> after(out_count);
  std::vector<double> lse(kAttention.batch * kAttention.heads * kAttention.time);
  causal_attention_forward<double>(before, lse, qkv, kAttention, one_thread());
  const std::size_t row = 3 * kAttention.channels();
  for (std::size_t e = 0; e < row; ++e) qkv[4 * row + e] += 1.0;  // batch 0, token 4
  causal_attention_forward<double>(after, lse, qkv, kAttention, one_thread());
  const std::size_t c = kAttention.channels();
  for (std::size_t i = 0; i < out_count; ++i) {
    const std::size_t token = i / c;
    if (token < 4 || token >= kAttention.time) {
      EXPECT_EQ(before[i], after[i]) << "token " << token;
    } else {
      EXPECT_NE(before[i], after[i]) << "token " << token;
    }
  }
}

// ---- dropout on the attention probabilities ----

constexpr float kAttentionDropout = 0.3F;

AttentionDropout attention_dropout(const AttentionShape& shape, float rate = kAttentionDropout) {
  return {rate, DropoutKey{7, 12, 4, 0}, shape.heads};
}

// Whether the naive reference keeps p_ij of (batch row b, head h): the mask the header defines,
// element ((b * total_heads + h) * T + i) * T + j of the site after key.first.
double naive_mask(const AttentionDropout& d, const AttentionShape& shape, std::size_t b,
                  std::size_t h, std::size_t i, std::size_t j) {
  const std::size_t t = shape.time;
  const std::size_t element = ((b * d.total_heads + h) * t + i) * t + j;
  return dropout_keeps(d.key, d.rate, element) ? 1.0 / (1.0 - static_cast<double>(d.rate)) : 0.0;
}

// The naive T x T attention with the mask applied to its probabilities after the softmax.
std::vector<double> naive_dropped_attention(const std::vector<double>& qkv,
                                            const AttentionShape& shape,
                                            const AttentionDropout& d) {
  const std::size_t c = shape.channels();
  const std::size_t t_count = shape.time;
  const double scale = 1.0 / std::sqrt(static_cast<double>(shape.head_size));
  std::vector<double> output(shape.batch * t_count * c, 0.0);
  for (std::size_t b = 0; b < shape.batch; ++b) {
    for (std::size_t h = 0; h < shape.heads; ++h) {
      auto at = [&](std::size_t t, std::size_t part, std::size_t k) {
        return qkv[(b * t_count + t) * 3 * c + part * c + h * shape.head_size + k];
      };
      for (std::size_t i = 0; i < t_count; ++i) {
        std::vector<double> p(i + 1);
        for (std::size_t j = 0; j <= i; ++j) {
          for (std::size_t k = 0; k < shape.head_size; ++k) p[j] += at(i, 0, k) * at(j, 1, k);
          p[j] *= scale;
        }
        const double row_max = *std::max_element(p.begin(), p.end());
        double sum = 0.0;
        for (double& v : p) sum += (v = std::exp(v - row_max));
        for (std::size_t j = 0; j <= i; ++j) {
          const double weight = p[j] / sum * naive_mask(d, shape, b, h, i, j);
          for (std::size_t k = 0; k < shape.head_size; ++k) {
            output[(b * t_count + i) * c + h * shape.head_size + k] += weight * at(j, 2, k);
          }
        }
      }
    }
  }
  return output;
}

TEST(CausalAttentionKernel, DropoutForwardIsTheNaiveSoftmaxThenTheMask) {
  const auto qkv = uniform<double>(qkv_count(kAttention), 13, -2.0, 2.0);
  std::vector<double> output(kAttention.batch * kAttention.time * kAttention.channels());
  std::vector<double> lse(kAttention.batch * kAttention.heads * kAttention.time);
  const auto drop = attention_dropout(kAttention);
  causal_attention_forward<double>(output, lse, qkv, kAttention, one_thread(), drop);
  const auto expected = naive_dropped_attention(qkv, kAttention, drop);
  for (std::size_t i = 0; i < output.size(); ++i) {
    EXPECT_NEAR(output[i], expected[i], 1e-13) << "output " << i;
  }
  // The log-sum-exps are the undropped softmax's (its normaliser).
  std::vector<double> plain_output;
  std::vector<double> plain_lse;
  naive_attention(qkv, kAttention, plain_output, plain_lse);
  for (std::size_t i = 0; i < lse.size(); ++i) {
    EXPECT_NEAR(lse[i], plain_lse[i], 1e-13) << "log-sum-exp " << i;
  }
  // The mask on this shape both keeps and drops: otherwise the comparisons would not tell.
  std::size_t dropped = 0;
  for (std::size_t i = 0; i < kAttention.time; ++i) {
    for (std::size_t j = 0; j <= i; ++j) dropped += naive_mask(drop, kAttention, 1, 2, i, j) == 0.0;
  }
  EXPECT_GT(dropped, 0U);
  EXPECT_LT(dropped, kAttention.time * (kAttention.time + 1) / 2);
}

TEST(CausalAttentionKernel, DropoutBackwardMatchesFiniteDifferencesOfTheMaskedForward) {
  expect_attention_gradient(attention_dropout(kAttention));
}

// A call over some heads (a tensor rank's) or some batch rows (a micro-batch) keyed where they
// lie draws the bits the whole call draws there: outputs, log-sum-exps and gradients equal bit
// for bit to the whole call's, at 2 and 3 slices of 6 heads and for each batch row alone.
TEST(CausalAttentionKernel, DropoutOfAHeadSliceOrABatchRowDrawsTheWholeCallsMask) {
  const AttentionShape whole{3, 11, 6, 5};
  const std::size_t c = whole.channels();
  const std::size_t tokens = whole.batch * whole.time;
  const auto qkv = uniform<float>(tokens * 3 * c, 40);
  const auto dy = uniform<float>(tokens * c, 41);
  const auto drop = attention_dropout(whole, 0.25F);
  std::vector<float> output(tokens * c);
  std::vector<float> lse(tokens * whole.heads);
  causal_attention_forward<float>(output, lse, qkv, whole, one_thread(), drop);
  std::vector<float> grad_qkv(qkv.size());
  causal_attention_backward<float>(grad_qkv, dy, qkv, output, lse, whole, one_thread(), drop);
  const std::size_t per_head = whole.time * whole.time;

  for (const std::size_t slices : {2, 3}) {
    const std::size_t heads = whole.heads / slices;
    const AttentionShape part{whole.batch, whole.time, heads, whole.head_size};
    const std::size_t pc = part.channels();
    for (std::size_t s = 0; s < slices; ++s) {
      SCOPED_TRACE("slice " + std::to_string(s) + " of " + std::to_string(slices));
      // The slice's Q, K and V columns of each token, [Q_heads; K_heads; V_heads].
      std::vector<float> part_qkv(tokens * 3 * pc);
      std::vector<float> part_dy(tokens * pc);
      for (std::size_t t = 0; t < tokens; ++t) {
        for (std::size_t k = 0; k < 3; ++k) {
          std::copy_n(qkv.begin() + t * 3 * c + k * c + s * pc, pc,
                      part_qkv.begin() + t * 3 * pc + k * pc);
        }
        std::copy_n(dy.begin() + t * c + s * pc, pc, part_dy.begin() + t * pc);
      }
      AttentionDropout part_drop = drop;
      part_drop.key.first += s * heads * per_head;
      std::vector<float> part_output(tokens * pc);
      std::vector<float> part_lse(tokens * heads);
      causal_attention_forward<float>(part_output, part_lse, part_qkv, part, one_thread(),
                                      part_drop);
      std::vector<float> part_grad(part_qkv.size());
      causal_attention_backward<float>(part_grad, part_dy, part_qkv, part_output, part_lse, part,
                                       one_thread(), part_drop);
      for (std::size_t t = 0; t < tokens; ++t) {
        for (std::size_t e = 0; e < pc; ++e) {
          ASSERT_EQ(part_output[t * pc + e], output[t * c + s * pc + e]) << "token " << t;
        }
        for (std::size_t k = 0; k < 3; ++k) {
          for (std::size_t e = 0; e < pc; ++e) {
            ASSERT_EQ(part_grad[t * 3 * pc + k * pc + e], grad_qkv[t * 3 * c + k * c + s * pc + e])
                << "token " << t << ", part " << k;
          }
        }
      }
    }
  }
  for (std::size_t b = 0; b < whole.batch; ++b) {
    SCOPED_TRACE("batch row " + std::to_string(b));
    const AttentionShape row{1, whole.time, whole.heads, whole.head_size};
    const std::size_t row_tokens = whole.time;
    const std::vector<float> row_qkv(qkv.begin() + b * row_tokens * 3 * c,
                                     qkv.begin() + (b + 1) * row_tokens * 3 * c);
    const std::vector<float> row_dy(dy.begin() + b * row_tokens * c,
                                    dy.begin() + (b + 1) * row_tokens * c);
    AttentionDropout row_drop = drop;
    row_drop.key.first += b * whole.heads * per_head;
    std::vector<float> row_output(row_tokens * c);
    std::vector<float> row_lse(row_tokens * whole.heads);
    causal_attention_forward<float>(row_output, row_lse, row_qkv, row, one_thread(), row_drop);
    std::vector<float> row_grad(row_qkv.size());
    causal_attention_backward<float>(row_grad, row_dy, row_qkv, row_output, row_lse, row,
                                     one_thread(), row_drop);
    EXPECT_TRUE(
        std::equal(row_output.begin(), row_output.end(), output.begin() + b * row_tokens * c));
    EXPECT_TRUE(
        std::equal(row_grad.begin(), row_grad.end(), grad_qkv.begin() + b * row_tokens * 3 * c));
  }
}

// Over many draws the kept share of the probabilities is 1 - rate, and heads do not share a
// mask. With Q = K = 0 every row's probabilities are 1 / (i + 1), and V's first channel is 1,
// so that channel of O_i is (kept in row i) / ((i + 1)(1 - rate)): the kernel's own count.
TEST(CausalAttentionKernel, DropoutKeepsOneMinusTheRateOfTheProbabilities) {
  const AttentionShape shape{5, 97, 4, 3};  // 20 pairs x 4,753 probabilities
  const std::size_t c = shape.channels();
  const std::size_t tokens = shape.batch * shape.time;
  std::vector<double> qkv(tokens * 3 * c, 0.0);
  for (std::size_t t = 0; t < tokens; ++t) {
    for (std::size_t h = 0; h < shape.heads; ++h) qkv[t * 3 * c + 2 * c + h * shape.head_size] = 1;
  }
  for (const float rate : {0.1F, 0.5F}) {
    SCOPED_TRACE(rate);
    std::vector<double> output(tokens * c);
    std::vector<double> lse(tokens * shape.heads);
    causal_attention_forward<double>(output, lse, qkv, shape, one_thread(),
                                     attention_dropout(shape, rate));
    double kept = 0;
    std::size_t pairs = 0;
    std::size_t rows_alike = 0;
    for (std::size_t t = 0; t < tokens; ++t) {
      const double row = static_cast<double>(t % shape.time + 1) * (1.0 - rate);
      std::vector<double> counts(shape.heads);
      for (std::size_t h = 0; h < shape.heads; ++h) {
        counts[h] = std::round(output[t * c + h * shape.head_size] * row);
        kept += counts[h];
      }
      pairs += (t % shape.time + 1) * shape.heads;
      rows_alike += counts[0] == counts[1] && counts[1] == counts[2] && counts[2] == counts[3];
    }
    const double share = kept / static_cast<double>(pairs);
    // 95,060 draws: the share's standard deviation is below 0.0017 at rate 0.5; 4 of them.
    EXPECT_NEAR(share, 1.0 - rate, 0.007);
    EXPECT_LT(rows_alike, tokens / 4) << "the heads drew one mask";
  }
}

// ---- vocabulary cross-entropy ----

constexpr std::size_t kVocab = 11;

std::vector<std::int64_t> targets_with_ignored() {
  // Rows 2, 9 and 13 ignored; 0 and 10 (the vocabulary's ends) present.
  return {3, 0, kDefaultIgnoreIndex, 10, 5, 5, 1,
          7, 2, kDefaultIgnoreIndex, 9,  4, 6, kDefaultIgnoreIndex};
}

TEST(VocabCrossEntropyKernel, ForwardSumsCountedRowsOnly) {
  const auto targets = targets_with_ignored();
  const auto logits = uniform<double>(targets.size() * kVocab, 18, -3.0, 3.0);
  std::vector<double> lse(targets.size());
  const CrossEntropySum result = vocab_cross_entropy_forward<double>(
      lse, logits, targets, kVocab, kDefaultIgnoreIndex, one_thread());
  double expected = 0.0;
  for (std::size_t r = 0; r < targets.size(); ++r) {
    if (targets[r] == kDefaultIgnoreIndex) continue;
    double sum = 0.0;
    for (std::size_t c = 0; c < kVocab; ++c) sum += std::exp(logits[r * kVocab + c]);
    expected += std::log(sum) - logits[r * kVocab + static_cast<std::size_t>(targets[r])];
  }
  EXPECT_EQ(result.counted, 11U);
  EXPECT_NEAR(result.loss_sum, expected, 1e-12);
}

TEST(VocabCrossEntropyKernel, BackwardMatchesFiniteDifferencesAndIgnoredRowsGetZero) {
  const auto targets = targets_with_ignored();
  auto logits = uniform<double>(targets.size() * kVocab, 19, -3.0, 3.0);
  std::vector<double> lse(targets.size());
  const double scale = 1.0 / 11.0;  // the mean per counted token
  auto forward = [&] {
    return scale * vocab_cross_entropy_forward<double>(lse, logits, targets, kVocab,
                                                       kDefaultIgnoreIndex, one_thread())
                       .loss_sum;
  };
  forward();
  std::vector<double> grad(logits.size(), -1.0);  // backward writes, so no prior survives
  vocab_cross_entropy_backward<double>(grad, logits, lse, targets, kVocab, kDefaultIgnoreIndex,
                                       scale, one_thread());
  for (std::size_t c = 0; c < kVocab; ++c) {
    EXPECT_EQ(grad[2 * kVocab + c], 0.0);
    EXPECT_EQ(grad[13 * kVocab + c], 0.0);
  }
  for (double& g : grad) g += kPrior;  // expect_gradient subtracts the prior
  expect_gradient("logits", logits, grad, forward);
}

TEST(VocabCrossEntropyKernel, IgnoreIndexMayBeAnyValue) {
  // With ignore_index 5, the two rows of target 5 drop out and -100 is an error.
  auto targets = targets_with_ignored();
  for (auto& t : targets) t = t == kDefaultIgnoreIndex ? 8 : t;
  const auto logits = uniform<double>(targets.size() * kVocab, 20);
  std::vector<double> lse(targets.size());
  EXPECT_EQ(
      vocab_cross_entropy_forward<double>(lse, logits, targets, kVocab, 5, one_thread()).counted,
      12U);
  targets[6] = kDefaultIgnoreIndex;
  EXPECT_THROW(
      (void)vocab_cross_entropy_forward<double>(lse, logits, targets, kVocab, 5, one_thread()),
      InvalidArgument);
}

TEST(VocabCrossEntropyKernel, RefusesATargetOutsideTheVocabularyNamingItsRow) {
  auto targets = targets_with_ignored();
  targets[4] = static_cast<std::int64_t>(kVocab);
  const auto logits = uniform<double>(targets.size() * kVocab, 21);
  std::vector<double> lse(targets.size());
  try {
    (void)vocab_cross_entropy_forward<double>(lse, logits, targets, kVocab, kDefaultIgnoreIndex,
                                              one_thread());
    FAIL() << "expected InvalidArgument";
  } catch (const InvalidArgument& e) {
    EXPECT_NE(std::string(e.what()).find("target 11 of row 4"), std::string::npos) << e.what();
  }
}

// ---- the same bits at any thread count and in either instruction-set copy ----

// Shapes large enough that every kernel's parallel_for really splits (at least two grains of
// rows, channels or (batch, head) pairs), in float as the model runs them. Time, rows and
// vocabulary are not multiples of 8, so that the AVX2 loops run their remainders too.
struct AllKernelOutputs {
  std::vector<float> embedded, grad_wte, grad_wpe;
  std::vector<float> normed, mean, rstd, grad_ln_input, grad_ln_weight, grad_ln_bias;
  std::vector<float> activated, grad_gelu;
  std::vector<float> attended, lse, grad_qkv;
  std::vector<float> attended_dropped, lse_dropped, grad_qkv_dropped;  // attention dropout 0.1
  std::vector<float> token_lse, grad_logits;
  double loss_sum = 0.0;
  std::vector<float> grad_softmax_logits;  // the model's loss (softmax_cross_entropy)
  double softmax_loss_sum = 0.0;
  std::size_t softmax_correct = 0;
};

AllKernelOutputs run_every_kernel(int threads, VectorIsa isa) {
  const ComputeContext compute(threads, isa);
  const AttentionShape attention{4, 67, 6, 16};
  const std::size_t c = attention.channels();
  const std::size_t rows = attention.batch * attention.time;
  const EmbeddingShape embedding{attention.batch, attention.time, c, 300, 80};
  AllKernelOutputs o;
  std::vector<std::int64_t> tokens(rows);
  for (std::size_t i = 0; i < rows; ++i) tokens[i] = static_cast<std::int64_t>((i * 37) % 300);
  const auto wte = uniform<float>(300 * c, 30);
  const auto wpe = uniform<float>(80 * c, 31);
  o.embedded.resize(rows * c);
  embedding_forward<float>(o.embedded, tokens, wte, wpe, embedding, compute);
  const auto dy = uniform<float>(rows * c, 32);
  o.grad_wte.assign(wte.size(), 0.0F);
  o.grad_wpe.assign(wpe.size(), 0.0F);
  embedding_backward<float>(o.grad_wte, o.grad_wpe, dy, tokens, embedding, compute);

  const auto weight = uniform<float>(c, 33, 0.5, 1.5);
  const auto bias = uniform<float>(c, 34);
  o.normed.resize(rows * c);
  o.mean.resize(rows);
  o.rstd.resize(rows);
  layer_norm_forward<float>(o.normed, o.mean, o.rstd, o.embedded, weight, bias, rows, c, compute);
  o.grad_ln_input.assign(rows * c, 0.0F);
  o.grad_ln_weight.assign(c, 0.0F);
  o.grad_ln_bias.assign(c, 0.0F);
  layer_norm_backward<float>(o.grad_ln_input, o.grad_ln_weight, o.grad_ln_bias, dy, o.embedded,
                             weight, o.mean, o.rstd, rows, c, compute);

  const auto wide = uniform<float>(rows * 4 * c, 35, -3.0, 3.0);
  const auto wide_dy = uniform<float>(wide.size(), 36);
  o.activated.resize(wide.size());
  gelu_forward<float>(o.activated, wide, compute);
  o.grad_gelu.assign(wide.size(), 0.0F);
  gelu_backward<float>(o.grad_gelu, wide_dy, wide, compute);

  const auto qkv = uniform<float>(rows * 3 * c, 37);
  o.attended.resize(rows * c);
  o.lse.resize(rows * attention.heads);
  causal_attention_forward<float>(o.attended, o.lse, qkv, attention, compute);
  o.grad_qkv.assign(qkv.size(), 0.0F);
  causal_attention_backward<float>(o.grad_qkv, dy, qkv, o.attended, o.lse, attention, compute);
  const AttentionDropout drop{0.1F, DropoutKey{3, 5, 2, 0}, attention.heads};
  o.attended_dropped.resize(rows * c);
  o.lse_dropped.resize(rows * attention.heads);
  causal_attention_forward<float>(o.attended_dropped, o.lse_dropped, qkv, attention, compute, drop);
  o.grad_qkv_dropped.assign(qkv.size(), 0.0F);
  causal_attention_backward<float>(o.grad_qkv_dropped, dy, qkv, o.attended_dropped, o.lse_dropped,
                                   attention, compute, drop);

  std::vector<std::int64_t> targets(rows);
  for (std::size_t i = 0; i < rows; ++i) {
    targets[i] = i % 5 == 0 ? kDefaultIgnoreIndex : static_cast<std::int64_t>((i * 7) % 300);
  }
  const auto logits = uniform<float>(rows * 300, 38, -4.0, 4.0);
  o.token_lse.resize(rows);
  o.loss_sum = vocab_cross_entropy_forward<float>(o.token_lse, logits, targets, 300,
                                                  kDefaultIgnoreIndex, compute)
                   .loss_sum;
  o.grad_logits.resize(logits.size());
  vocab_cross_entropy_backward<float>(o.grad_logits, logits, o.token_lse, targets, 300,
                                      kDefaultIgnoreIndex, 1.0F / 214.0F, compute);

  Tensor logit_tensor({rows, 300}, DType::f32);
  std::copy(logits.begin(), logits.end(), logit_tensor.as<float>().begin());
  static_assert(kDefaultIgnoreIndex == kIgnoreTarget);  // the same targets serve both losses
  Tensor target_tensor({rows}, DType::i64);
  std::copy(targets.begin(), targets.end(), target_tensor.as<std::int64_t>().begin());
  const LossResult loss = softmax_cross_entropy(logit_tensor, target_tensor, 300, compute);
  const auto grad = loss.grad_logits.as<float>();
  o.grad_softmax_logits.assign(grad.begin(), grad.end());
  o.softmax_loss_sum = loss.loss_sum;
  o.softmax_correct = loss.correct;
  return o;
}

void expect_same_bits(const char* what, const std::vector<float>& a, const std::vector<float>& b) {
  ASSERT_EQ(a.size(), b.size()) << what;
  EXPECT_EQ(std::memcmp(a.data(), b.data(), a.size() * sizeof(float)), 0) << what;
}

void expect_same_outputs(const AllKernelOutputs& single, const AllKernelOutputs& many) {
  expect_same_bits("embedding", single.embedded, many.embedded);
  expect_same_bits("grad wte", single.grad_wte, many.grad_wte);
  expect_same_bits("grad wpe", single.grad_wpe, many.grad_wpe);
  expect_same_bits("layer norm", single.normed, many.normed);
  expect_same_bits("layer norm rstd", single.rstd, many.rstd);
  expect_same_bits("grad layer norm input", single.grad_ln_input, many.grad_ln_input);
  expect_same_bits("grad layer norm weight", single.grad_ln_weight, many.grad_ln_weight);
  expect_same_bits("grad layer norm bias", single.grad_ln_bias, many.grad_ln_bias);
  expect_same_bits("gelu", single.activated, many.activated);
  expect_same_bits("grad gelu", single.grad_gelu, many.grad_gelu);
  expect_same_bits("attention", single.attended, many.attended);
  expect_same_bits("attention log-sum-exp", single.lse, many.lse);
  expect_same_bits("grad qkv", single.grad_qkv, many.grad_qkv);
  expect_same_bits("attention, dropped", single.attended_dropped, many.attended_dropped);
  expect_same_bits("attention log-sum-exp, dropped", single.lse_dropped, many.lse_dropped);
  expect_same_bits("grad qkv, dropped", single.grad_qkv_dropped, many.grad_qkv_dropped);
  expect_same_bits("grad logits", single.grad_logits, many.grad_logits);
  EXPECT_EQ(single.loss_sum, many.loss_sum);
  expect_same_bits("grad softmax logits", single.grad_softmax_logits, many.grad_softmax_logits);
  EXPECT_EQ(single.softmax_loss_sum, many.softmax_loss_sum);
  EXPECT_EQ(single.softmax_correct, many.softmax_correct);
}

TEST(TransformerKernels, GiveTheSameBitsAtOneTwoAndThreeThreads) {
  const AllKernelOutputs single = run_every_kernel(1, widest_vector_isa());
  for (int threads : {2, 3}) {
    SCOPED_TRACE(threads);
    expect_same_outputs(single, run_every_kernel(threads, widest_vector_isa()));
  }
}

// The AVX2 copies of the kernels' loops (ComputeContext::parallel_for) compute what the baseline
// x86-64 ones do, bit for bit: 8 lanes where there were 4, no FMA, no reassociation.
TEST(TransformerKernels, GiveTheSameBitsWithAvx2LoopsAsWithBaselineOnes) {
  if (widest_vector_isa() != VectorIsa::avx2) GTEST_SKIP() << "this CPU has no AVX2";
  const AllKernelOutputs baseline = run_every_kernel(1, VectorIsa::baseline);
  for (int threads : {1, 2}) {
    SCOPED_TRACE(threads);
    expect_same_outputs(baseline, run_every_kernel(threads, VectorIsa::avx2));
  }
}

}  // namespace
}  // namespace tessera::layers
