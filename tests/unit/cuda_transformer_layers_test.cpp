// The transformer kernels on a CUDA device (embedding, layer norm, GELU, causal attention,
// cross-entropy over a vocabulary, dropout, the residual add) against the host's, through their
// Tensor forms, on shapes that are not nice: sequences of 37 and 130 tokens (past one tile and
// one 64-row block, with short last ones), 3 heads, head sizes 5, 64 and 100 (each of the
// attention kernels' 32, 64 and 128 copies, zero-padded), widths below, between and past a warp,
// vocabularies of 29 and 50,257, ignored targets. Each also runs twice on the device for the
// same bits. Without a visible GPU these skip (CI has none); the refusals of devices this
// process does not see run everywhere.
//
// Where the device cannot give the host's bits (other summation orders, CUDA's expf and tanhf
// against the host's polynomial exponential, fused multiply-adds), the check is against the same
// kernel in double on the host (the span kernels' double instantiation): the GPU must be as close
// to that exact result as the host's float kernel is, within 4 times the host's largest error plus
// 1e-6 of the tensor's largest value. Both are float computations of one formula, so their
// errors are of one size; a wrong index, a missed key or row, a wrong mask or scale moves
// elements by the size of the values themselves, orders of magnitude past that.

#include <cuda_runtime_api.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "cuda_test_support.hpp"
#include "layers/causal_attention_tensors.hpp"
#include "layers/device_compute.hpp"
#include "layers/dropout.hpp"
#include "layers/embedding.hpp"
#include "layers/gelu.hpp"
#include "layers/layer_norm.hpp"
#include "layers/softmax_cross_entropy.hpp"
#include "tessera/base/error.hpp"
#include "tessera/base/random.hpp"

namespace tessera::layers {
namespace {

using testing::copy_of;
using testing::expect_bitwise;
using testing::on_gpu;
using testing::on_host;
using testing::random_tensor;

constexpr double kHostErrorFactor = 4.0;
constexpr double kErrorFloor = 1e-6;

std::vector<double> doubles(const Tensor& host) {
  const auto v = host.as<float>();
  return {v.begin(), v.end()};
}

// max |gpu - exact| <= 4 max |host - exact| + 1e-6 max |exact| (see the top of the file).
void expect_as_accurate_as_host(const Tensor& gpu, const Tensor& host,
                                const std::vector<double>& exact, const std::string& what) {
  ASSERT_EQ(gpu.device(), Device::cuda(0)) << what;
  ASSERT_EQ(gpu.count(), exact.size()) << what;
  ASSERT_EQ(host.count(), exact.size()) << what;
  const Tensor back = on_host(gpu);
  const auto g = back.as<float>();
  const auto h = host.as<float>();
  double host_error = 0.0;
  double largest = 0.0;
  for (std::size_t i = 0; i < exact.size(); ++i) {
    host_error = std::max(host_error, std::abs(double{h[i]} - exact[i]));
    largest = std::max(largest, std::abs(exact[i]));
  }
  const double bound = kHostErrorFactor * host_error + kErrorFloor * largest;
  for (std::size_t i = 0; i < exact.size(); ++i) {
    ASSERT_LE(std::abs(double{g[i]} - exact[i]), bound)
        << what << ", element " << i << ": gpu " << g[i] << ", host " << h[i] << ", exact "
        << exact[i] << " (the host's largest error " << host_error << ")";
  }
}

Tensor sum_of(const Tensor& a, float offset) {
  Tensor out = copy_of(a);
  for (float& v : out.as<float>()) v += offset;
  return out;
}

class CudaTransformerLayers : public testing::CudaTest {
 protected:
  ComputeContext compute_{1};
};

// --- Embedding ---------------------------------------------------------------------------------

Tensor tokens_for(const EmbeddingShape& shape, std::uint64_t seed) {
  Tensor tokens({shape.batch, shape.time}, DType::i64);
  auto ids = tokens.as<std::int64_t>();
  for (std::size_t i = 0; i < ids.size(); ++i) {
    ids[i] = static_cast<std::int64_t>(counter_random(seed, 3, i) % shape.vocab);
  }
  return tokens;
}

TEST_F(CudaTransformerLayers, EmbeddingForwardAndBackwardGiveTheHostsBits) {
  // A small vocabulary (7) repeats every id about 55 times a sequence: each row's gradient sums
  // many tokens, in token order on both sides.
  for (const EmbeddingShape shape :
       {EmbeddingShape{3, 37, 29, 50, 40}, EmbeddingShape{3, 130, 64, 7, 130},
        EmbeddingShape{1, 3, 64, 50257, 1024}}) {
    SCOPED_TRACE("vocab " + std::to_string(shape.vocab) + ", time " + std::to_string(shape.time));
    const Tensor tokens = tokens_for(shape, 5);
    const Tensor wte = random_tensor({shape.vocab, shape.channels}, 11);
    const Tensor wpe = random_tensor({shape.context, shape.channels}, 12);
    const Tensor dy = random_tensor({shape.batch, shape.time, shape.channels}, 13);
    const Tensor host_out = embedding_forward(tokens, wte.view(), wpe.view(), shape, compute_);
    Tensor host_gw = random_tensor(wte.shape(), 14);  // backward adds into what is there
    Tensor host_gp = random_tensor(wpe.shape(), 15);
    const Tensor gw_start = copy_of(host_gw);
    const Tensor gp_start = copy_of(host_gp);
    embedding_backward(host_gw.view(), host_gp.view(), dy, tokens, shape, compute_);
    const Tensor gpu_wte = on_gpu(wte);
    const Tensor gpu_wpe = on_gpu(wpe);
    for (const bool tokens_on_gpu : {false, true}) {
      SCOPED_TRACE(tokens_on_gpu ? "ids on the gpu" : "ids on the host");
      const Tensor ids = tokens_on_gpu ? on_gpu(tokens) : copy_of(tokens);
      const Tensor out = embedding_forward(ids, gpu_wte.view(), gpu_wpe.view(), shape, compute_);
      EXPECT_EQ(out.shape(), host_out.shape());
      expect_bitwise(out, host_out, "forward");
      for (int run = 0; run < 2; ++run) {
        const Tensor gw = on_gpu(gw_start);
        const Tensor gp = on_gpu(gp_start);
        embedding_backward(gw.view(), gp.view(), on_gpu(dy), ids, shape, compute_);
        expect_bitwise(gw, host_gw, "token table gradient, run " + std::to_string(run));
        expect_bitwise(gp, host_gp, "position table gradient, run " + std::to_string(run));
      }
    }
  }
}

TEST_F(CudaTransformerLayers, EmbeddingRefusesATokenOutsideTheVocabularyNamingItsPlace) {
  const EmbeddingShape shape{2, 6, 8, 10, 6};
  Tensor tokens = tokens_for(shape, 1);
  tokens.as<std::int64_t>()[1 * 6 + 4] = 10;
  const Tensor wte = on_gpu(random_tensor({10, 8}, 2));
  const Tensor wpe = on_gpu(random_tensor({6, 8}, 3));
  for (const bool tokens_on_gpu : {false, true}) {
    try {
      (void)embedding_forward(tokens_on_gpu ? on_gpu(tokens) : copy_of(tokens), wte.view(),
                              wpe.view(), shape, compute_);
      ADD_FAILURE() << "token 10 of a vocabulary of 10 accepted";
    } catch (const InvalidArgument& e) {
      EXPECT_NE(std::string(e.what()).find("at batch 1, position 4"), std::string::npos)
          << e.what();
    }
  }
}

// --- Layer norm --------------------------------------------------------------------------------

struct LayerNormRun {
  Tensor output, mean, rstd, grad_input, grad_weight, grad_bias;
};

// One forward and backward through the Tensor forms, on the device of the inputs.
LayerNormRun run_layer_norm(const Tensor& x, const Tensor& w, const Tensor& b, const Tensor& dy,
                            const Tensor& dx0, const Tensor& gw0, const Tensor& gb0,
                            const ComputeContext& compute) {
  const std::size_t channels = w.count();
  LayerNormOutput f = layer_norm_forward(x, w.view(), b.view(), channels, compute);
  LayerNormRun run{std::move(f.output), std::move(f.mean), std::move(f.rstd),
                   dx0.alias(),         gw0.alias(),       gb0.alias()};
  layer_norm_backward(run.grad_input, run.grad_weight.view(), run.grad_bias.view(), dy, x, w.view(),
                      run.mean, run.rstd, channels, compute);
  return run;
}

TEST_F(CudaTransformerLayers, LayerNormIsAsAccurateAsTheHost) {
  // 111 rows: one partial chunk of the parameter gradients; 390: six of 64 and a short seventh.
  using RowsAndChannels = std::pair<std::size_t, std::size_t>;
  for (const auto& [rows, channels] :
       {RowsAndChannels{3 * 37, 29}, RowsAndChannels{3 * 130, 77}, RowsAndChannels{2 * 130, 768}}) {
    SCOPED_TRACE(std::to_string(rows) + " rows of " + std::to_string(channels));
    // An offset well above the spread: the two-pass variance must not cancel.
    const Tensor x = sum_of(random_tensor({rows, channels}, 1, 2.0F), 3.0F);
    const Tensor w = sum_of(random_tensor({channels}, 2, 0.5F), 1.0F);
    const Tensor b = random_tensor({channels}, 3);
    const Tensor dy = random_tensor({rows, channels}, 4);
    const Tensor dx0 = random_tensor({rows, channels}, 5);
    const Tensor gw0 = random_tensor({channels}, 6);
    const Tensor gb0 = random_tensor({channels}, 7);
    const LayerNormRun host =
        run_layer_norm(x, w, b, dy, copy_of(dx0), copy_of(gw0), copy_of(gb0), compute_);
    // The exact result: the same kernels in double.
    const std::vector<double> xd = doubles(x);
    const std::vector<double> wd = doubles(w);
    const std::vector<double> bd = doubles(b);
    const std::vector<double> dyd = doubles(dy);
    std::vector<double> out(rows * channels);
    std::vector<double> mean(rows);
    std::vector<double> rstd(rows);
    layer_norm_forward<double>(out, mean, rstd, xd, wd, bd, rows, channels, compute_);
    std::vector<double> dx = doubles(dx0);
    std::vector<double> gw = doubles(gw0);
    std::vector<double> gb = doubles(gb0);
    layer_norm_backward<double>(dx, gw, gb, dyd, xd, wd, mean, rstd, rows, channels, compute_);

    const LayerNormRun gpu = run_layer_norm(on_gpu(x), on_gpu(w), on_gpu(b), on_gpu(dy),
                                            on_gpu(dx0), on_gpu(gw0), on_gpu(gb0), compute_);
    expect_as_accurate_as_host(gpu.output, host.output, out, "output");
    expect_as_accurate_as_host(gpu.mean, host.mean, mean, "mean");
    expect_as_accurate_as_host(gpu.rstd, host.rstd, rstd, "rstd");
    expect_as_accurate_as_host(gpu.grad_input, host.grad_input, dx, "input gradient");
    expect_as_accurate_as_host(gpu.grad_weight, host.grad_weight, gw, "weight gradient");
    expect_as_accurate_as_host(gpu.grad_bias, host.grad_bias, gb, "bias gradient");

    const LayerNormRun again = run_layer_norm(on_gpu(x), on_gpu(w), on_gpu(b), on_gpu(dy),
                                              on_gpu(dx0), on_gpu(gw0), on_gpu(gb0), compute_);
    expect_bitwise(again.output, gpu.output, "output, second run");
    expect_bitwise(again.grad_input, gpu.grad_input, "input gradient, second run");
    expect_bitwise(again.grad_weight, gpu.grad_weight, "weight gradient, second run");
    expect_bitwise(again.grad_bias, gpu.grad_bias, "bias gradient, second run");
  }
}

// --- GELU --------------------------------------------------------------------------------------

TEST_F(CudaTransformerLayers, GeluIsAsAccurateAsTheHostAndItsBackwardAdds) {
  const Tensor x = random_tensor({70, 33}, 5, 4.0F);
  const Tensor dy = random_tensor({70, 33}, 6);
  const Tensor dx0 = random_tensor({70, 33}, 7);
  const Tensor host_y = gelu_forward(x, compute_);
  Tensor host_dx = copy_of(dx0);
  gelu_backward(host_dx, dy, x, compute_);
  std::vector<double> y(x.count());
  std::vector<double> dx = doubles(dx0);
  const std::vector<double> xd = doubles(x);
  gelu_forward<double>(y, xd, compute_);
  gelu_backward<double>(dx, doubles(dy), xd, compute_);
  const auto run = [&] {
    std::pair<Tensor, Tensor> out{gelu_forward(on_gpu(x), compute_), on_gpu(dx0)};
    gelu_backward(out.second, on_gpu(dy), on_gpu(x), compute_);
    return out;
  };
  const auto [gpu_y, gpu_dx] = run();
  expect_as_accurate_as_host(gpu_y, host_y, y, "forward");
  expect_as_accurate_as_host(gpu_dx, host_dx, dx, "backward");
  const auto [again_y, again_dx] = run();
  expect_bitwise(again_y, gpu_y, "forward, second run");
  expect_bitwise(again_dx, gpu_dx, "backward, second run");
}

// --- Causal attention --------------------------------------------------------------------------

struct AttentionRun {
  Tensor output, log_sum_exp, grad_qkv;
};

AttentionRun run_attention(const Tensor& qkv, const Tensor& dout, const Tensor& grad0,
                           const AttentionShape& shape, const ComputeContext& compute) {
  AttentionOutput f = causal_attention_forward(qkv, shape, compute);
  AttentionRun run{std::move(f.output), std::move(f.log_sum_exp), grad0.alias()};
  causal_attention_backward(run.grad_qkv, dout, qkv, run.output, run.log_sum_exp, shape, compute);
  return run;
}

std::string text_of(const AttentionShape& s) {
  return "batch " + std::to_string(s.batch) + ", time " + std::to_string(s.time) + ", heads " +
         std::to_string(s.heads) + ", head size " + std::to_string(s.head_size);
}

TEST_F(CudaTransformerLayers, CausalAttentionIsAsAccurateAsTheHost) {
  // Head sizes 5, 32, 64 and 100 run the kernels' 32-, 32-, 64- and 128-wide copies; 37 and 130
  // tokens end inside a block of query rows and inside a tile of keys.
  for (const AttentionShape shape :
       {AttentionShape{2, 37, 3, 5}, AttentionShape{1, 37, 3, 32}, AttentionShape{1, 130, 3, 64},
        AttentionShape{2, 130, 2, 100}}) {
    SCOPED_TRACE(text_of(shape));
    const std::size_t tokens = shape.batch * shape.time;
    const Tensor qkv = random_tensor({shape.batch, shape.time, 3 * shape.channels()}, 1);
    const Tensor dout = random_tensor({shape.batch, shape.time, shape.channels()}, 2);
    const Tensor grad0 = random_tensor(qkv.shape(), 3);
    const AttentionRun host = run_attention(qkv, dout, copy_of(grad0), shape, compute_);
    const std::vector<double> qkvd = doubles(qkv);
    std::vector<double> out(tokens * shape.channels());
    std::vector<double> lse(tokens * shape.heads);
    causal_attention_forward<double>(out, lse, qkvd, shape, compute_);
    std::vector<double> grad = doubles(grad0);
    causal_attention_backward<double>(grad, doubles(dout), qkvd, out, lse, shape, compute_);

    const AttentionRun gpu =
        run_attention(on_gpu(qkv), on_gpu(dout), on_gpu(grad0), shape, compute_);
    EXPECT_EQ(gpu.log_sum_exp.shape(), (Shape{shape.batch, shape.heads, shape.time}));
    expect_as_accurate_as_host(gpu.output, host.output, out, "output");
    expect_as_accurate_as_host(gpu.log_sum_exp, host.log_sum_exp, lse, "log-sum-exp");
    expect_as_accurate_as_host(gpu.grad_qkv, host.grad_qkv, grad, "qkv gradient");

    const AttentionRun again =
        run_attention(on_gpu(qkv), on_gpu(dout), on_gpu(grad0), shape, compute_);
    expect_bitwise(again.output, gpu.output, "output, second run");
    expect_bitwise(again.log_sum_exp, gpu.log_sum_exp, "log-sum-exp, second run");
    expect_bitwise(again.grad_qkv, gpu.grad_qkv, "qkv gradient, second run");
  }
}

TEST_F(CudaTransformerLayers, CausalAttentionHoldsNoTimeByTimeMatrix) {
  // 4,096 tokens, 2 heads of 64: one head's scores would be 64 MiB; what forward and backward
  // allocate is the output (2 MiB), the log-sum-exps and backward's row terms (32 KiB each).
  const AttentionShape shape{1, 4096, 2, 64};
  const Tensor qkv = on_gpu(random_tensor({1, shape.time, 3 * shape.channels()}, 1));
  const Tensor dout = on_gpu(random_tensor({1, shape.time, shape.channels()}, 2));
  const Tensor grad = on_gpu(Tensor(qkv.shape(), DType::f32));
  cudaMemPool_t pool = nullptr;
  ASSERT_EQ(cudaDeviceGetDefaultMemPool(&pool, 0), cudaSuccess);
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  std::uint64_t before = 0;
  ASSERT_EQ(cudaMemPoolGetAttribute(pool, cudaMemPoolAttrUsedMemCurrent, &before), cudaSuccess);
  std::uint64_t reset = 0;  // the high-water mark starts again from what is in use now
  ASSERT_EQ(cudaMemPoolSetAttribute(pool, cudaMemPoolAttrUsedMemHigh, &reset), cudaSuccess);
  {
    const AttentionRun run = run_attention(qkv, dout, grad, shape, compute_);
    ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  }
  std::uint64_t high = 0;
  ASSERT_EQ(cudaMemPoolGetAttribute(pool, cudaMemPoolAttrUsedMemHigh, &high), cudaSuccess);
  const std::uint64_t one_head_scores = std::uint64_t{shape.time} * shape.time * sizeof(float);
  EXPECT_LT(high - before, one_head_scores / 4)
      << "attention allocated " << (high - before) << " bytes at its peak";
}

// --- Cross-entropy over a vocabulary -----------------------------------------------------------

TEST_F(CudaTransformerLayers, CrossEntropyOverAVocabularyMatchesTheHostAndSkipsIgnoredTargets) {
  // A language model's [batch, time, vocab] logits; every fourth target ignored.
  for (const Shape& shape : {Shape{3, 37, 29}, Shape{1, 3, 50257}}) {
    SCOPED_TRACE(shape_text(shape));
    const std::size_t rows = shape[0] * shape[1];
    const std::size_t vocab = shape[2];
    const Tensor logits = random_tensor(shape, 7, 3.0F);
    Tensor targets({shape[0], shape[1]}, DType::i64);
    for (std::size_t r = 0; r < rows; ++r) {
      targets.as<std::int64_t>()[r] =
          r % 4 == 1 ? kIgnoreTarget : static_cast<std::int64_t>((r * 7919) % vocab);
    }
    const LossResult host = softmax_cross_entropy(logits, targets, vocab, compute_);
    ASSERT_EQ(host.targets, rows - (rows + 2) / 4);
    for (int run = 0; run < 2; ++run) {
      const LossResult gpu = softmax_cross_entropy(on_gpu(logits), targets, vocab, compute_);
      EXPECT_EQ(gpu.targets, host.targets);
      EXPECT_EQ(gpu.correct, host.correct);
      // The host sums float exponentials (a few ulp each) in double, the GPU double ones: the
      // row's log-sum-exp agrees to a few parts in 1e7 of the sum, the mean (about log vocab)
      // to 1e-7 of itself.
      EXPECT_NEAR(gpu.mean(), host.mean(), 1e-7 * host.mean());
      // The host's gradient is a float exponential times a float scale, the GPU's a double
      // rounded once: within 16 float ulps of the host's; an ignored row is exactly 0.
      testing::expect_close(gpu.grad_logits, host.grad_logits, testing::absolute(host.grad_logits),
                            1e-6, "gradient");
      const Tensor back = on_host(gpu.grad_logits);
      for (std::size_t r = 1; r < rows; r += 4) {
        const auto row = back.as<float>().subspan(r * vocab, vocab);
        EXPECT_TRUE(std::all_of(row.begin(), row.end(), [](float g) { return g == 0.0F; }))
            << "ignored row " << r;
      }
    }
  }
}

// --- Dropout and the residual add --------------------------------------------------------------

TEST_F(CudaTransformerLayers, DropoutDrawsTheHostsMaskBitForBit) {
  const std::size_t n = 1000 * 37 + 3;
  const Tensor x = random_tensor({n}, 1);
  const Tensor dy = random_tensor({n}, 2);
  const Tensor dx0 = random_tensor({n}, 3);
  const DropoutKey key{7, 3, 2, 12345};
  for (const float p : {0.0F, 0.1F, 0.5F}) {
    SCOPED_TRACE("p = " + std::to_string(p));
    Tensor host_y({n}, DType::f32);
    dropout_forward<float>(host_y.as<float>(), x.as<float>(), p, key);
    Tensor host_dx = copy_of(dx0);
    dropout_backward<float>(host_dx.as<float>(), dy.as<float>(), p, key);
    const Tensor gpu_y = on_gpu(Tensor({n}, DType::f32));
    device::dropout_forward(gpu_y, on_gpu(x), p, key);
    expect_bitwise(gpu_y, host_y, "forward");
    const Tensor in_place = on_gpu(x);
    device::dropout_forward(in_place, in_place, p, key);
    expect_bitwise(in_place, host_y, "forward in place");
    const Tensor gpu_dx = on_gpu(dx0);
    device::dropout_backward(gpu_dx, on_gpu(dy), p, key);
    expect_bitwise(gpu_dx, host_dx, "backward");
  }
}

TEST_F(CudaTransformerLayers, TheResidualAddIsTheHostsSum) {
  const Tensor stream = random_tensor({3, 130, 77}, 1);
  const Tensor branch = random_tensor({3, 130, 77}, 2);
  Tensor host = copy_of(stream);
  for (std::size_t i = 0; i < host.count(); ++i) host.as<float>()[i] += branch.as<float>()[i];
  const Tensor gpu = on_gpu(stream);
  device::add_into(gpu, on_gpu(branch));
  expect_bitwise(gpu, host, "sum");
  EXPECT_THROW(device::add_into(gpu, on_gpu(random_tensor({3, 130, 76}, 3))), InvalidArgument);
}

// --- Refusals ----------------------------------------------------------------------------------

TEST_F(CudaTransformerLayers, RefusesParametersOnTheHostBesideAnInputOnTheGpu) {
  const Tensor x = on_gpu(random_tensor({4, 6}, 1));
  const Tensor w = random_tensor({6}, 2);
  const Tensor b = on_gpu(random_tensor({6}, 3));
  try {
    (void)layer_norm_forward(x, w.view(), b.view(), 6, compute_);
    ADD_FAILURE() << "a host weight accepted beside a cuda:0 input";
  } catch (const InvalidArgument& e) {
    EXPECT_NE(std::string(e.what()).find("layer_norm: weight is on cpu"), std::string::npos)
        << e.what();
  }
  const EmbeddingShape shape{1, 4, 6, 5, 4};
  Tensor tokens({1, 4}, DType::i64);
  try {
    (void)embedding_forward(on_gpu(tokens), random_tensor({5, 6}, 4).view(),
                            random_tensor({4, 6}, 5).view(), shape, compute_);
    ADD_FAILURE() << "ids on cuda:0 accepted beside host tables";
  } catch (const InvalidArgument& e) {
    EXPECT_NE(std::string(e.what()).find("the token tensor is on cuda:0"), std::string::npos)
        << e.what();
  }
}

TEST_F(CudaTransformerLayers, RefusesAHeadSizeAboveWhatTheKernelsTakeNamingIt) {
  const AttentionShape shape{1, 3, 1, 129};
  try {
    (void)causal_attention_forward(on_gpu(random_tensor({1, 3, 3 * 129}, 1)), shape, compute_);
    ADD_FAILURE() << "a head size of 129 accepted";
  } catch (const InvalidArgument& e) {
    EXPECT_NE(std::string(e.what()).find("head size of 129 is above the 128"), std::string::npos)
        << e.what();
  }
}

TEST(CudaTransformerLayersRefusal, InputsOnADeviceThisProcessDoesNotSeeAreRefusedByName) {
  const int unseen = tessera::cuda::device_count();
  const std::string where = "cuda:" + std::to_string(unseen);
  const auto device = std::make_shared<testing::UnseenDevice>(unseen);
  const ComputeContext compute(1);
  const auto expect_refusal = [&](const auto& call, const std::string& kernel) {
    try {
      call();
      ADD_FAILURE() << kernel << " accepted an input on " << where;
    } catch (const InvalidArgument& e) {
      const std::string message = e.what();
      EXPECT_NE(message.find(kernel), std::string::npos) << message;
      EXPECT_NE(message.find(where), std::string::npos) << message;
    }
  };
  const Tensor x = random_tensor({4, 6}, 1).copy_to(device);
  const Tensor w = random_tensor({6}, 2).copy_to(device);
  expect_refusal([&] { (void)layer_norm_forward(x, w.view(), w.view(), 6, compute); },
                 "layer_norm");
  expect_refusal([&] { (void)gelu_forward(x, compute); }, "gelu");
  expect_refusal(
      [&] {
        (void)causal_attention_forward(random_tensor({1, 2, 6}, 3).copy_to(device),
                                       AttentionShape{1, 2, 1, 2}, compute);
      },
      "causal_attention");
  const EmbeddingShape shape{1, 2, 6, 4, 4};
  expect_refusal(
      [&] {
        (void)embedding_forward(Tensor({1, 2}, DType::i64),
                                random_tensor({4, 6}, 4).copy_to(device).view(),
                                random_tensor({4, 6}, 5).copy_to(device).view(), shape, compute);
      },
      "embedding");
}

}  // namespace
}  // namespace tessera::layers
