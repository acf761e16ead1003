// The reference layers on a CUDA device: the same layer on the same inputs on the GPU and on the
// host agree, two GPU runs give the same bits, and buffers on mixed or unusable devices are
// refused by name. Without a visible GPU every test that computes skips (CI has none); the ones
// that only check refusals run everywhere.

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "cuda/cublas_handle.hpp"
#include "cuda_test_support.hpp"
#include "layers/activation.hpp"
#include "layers/linear.hpp"
#include "layers/softmax_cross_entropy.hpp"
#include "tessera/base/error.hpp"

namespace tessera::layers {
namespace {

using tessera::testing::absolute;
using tessera::testing::expect_bitwise;
using tessera::testing::expect_close;
using tessera::testing::on_gpu;
using tessera::testing::on_host;
using tessera::testing::random_tensor;

// GEMM results: the GPU and the host sum the same products in different orders (cuBLAS's tiles,
// with fused multiply-adds; OpenBLAS's kernels), each within k * 2^-24 of the exact sum relative
// to the sum of the terms' magnitudes. With every inner dimension k below 80 here that is under
// 5e-6 for each side, so 1e-5 of that magnitude admits both while refusing TF32 (2^-11).
constexpr double kGemmTolerance = 1e-5;

std::vector<BufferView> views_of(const std::vector<Tensor>& tensors) {
  std::vector<BufferView> views;
  for (const Tensor& t : tensors) views.push_back(t.view());
  return views;
}

std::vector<Tensor> zeros_like(const std::vector<ParamSpec>& specs, bool gpu) {
  std::vector<Tensor> out;
  for (const ParamSpec& spec : specs) {
    Tensor host(spec.shape, DType::f32);
    out.push_back(gpu ? on_gpu(host) : std::move(host));
  }
  return out;
}

std::vector<Tensor> random_params(const Layer& layer, std::uint64_t seed) {
  std::vector<Tensor> out;
  for (const ParamSpec& spec : layer.parameters()) out.push_back(random_tensor(spec.shape, seed++));
  return out;
}

std::vector<Tensor> gpu_copies(const std::vector<Tensor>& host) {
  std::vector<Tensor> out;
  for (const Tensor& t : host) out.push_back(on_gpu(t));
  return out;
}

// One layer's forward and backward on the host and on the GPU from the same inputs; the scales
// are the same layer run on magnitudes (|x|, |W|, |b|, |dy|), which gives each output element
// the sum of its terms' magnitudes.
void expect_linear_matches_host(const Layer& layer, std::size_t rows, std::size_t in,
                                std::size_t out) {
  const std::vector<Tensor> params = random_params(layer, 11);
  // Gradients start non-zero: backward adds into them.
  const std::vector<Tensor> start = random_params(layer, 31);
  const Tensor x = random_tensor({rows, in}, 21);
  const Tensor dy = random_tensor({rows, out}, 22);
  auto run = [&](const std::vector<Tensor>& p, const std::vector<Tensor>& g0, const Tensor& input,
                 const Tensor& upstream, bool gpu) {
    std::vector<Tensor> grads;
    for (const Tensor& g : g0) grads.push_back(gpu ? on_gpu(g) : testing::copy_of(g));
    const std::vector<Tensor> on_device = gpu ? gpu_copies(p) : std::vector<Tensor>{};
    const std::vector<BufferView> param_views = views_of(gpu ? on_device : p);
    const Tensor in_x = gpu ? on_gpu(input) : testing::copy_of(input);
    LayerContext ctx;
    Tensor y = layer.forward(in_x, param_views, ctx);
    Tensor dx = layer.backward(gpu ? on_gpu(upstream) : testing::copy_of(upstream), param_views,
                               views_of(grads), ctx);
    grads.push_back(std::move(y));
    grads.push_back(std::move(dx));
    return grads;  // dW, db, y, dx
  };
  std::vector<Tensor> magnitudes;
  for (const Tensor& p : params) magnitudes.push_back(absolute(p));
  std::vector<Tensor> start_magnitudes;
  for (const Tensor& g : start) start_magnitudes.push_back(absolute(g));
  const auto host = run(params, start, x, dy, false);
  const auto scale = run(magnitudes, start_magnitudes, absolute(x), absolute(dy), false);
  const auto gpu = run(params, start, x, dy, true);
  expect_close(gpu[2], host[2], scale[2], kGemmTolerance, "forward output");
  expect_close(gpu[0], host[0], scale[0], kGemmTolerance, "weight gradient");
  expect_close(gpu[3], host[3], scale[3], kGemmTolerance, "input gradient");
  // The bias gradient adds the rows in order on both sides: the same bits.
  expect_bitwise(gpu[1], host[1], "bias gradient");
}

class CudaLayers : public testing::CudaTest {
 protected:
  std::shared_ptr<const ComputeContext> compute_ = std::make_shared<ComputeContext>(1);
};

TEST_F(CudaLayers, LinearMatchesTheHost) {
  const Linear linear("fc", 45, 37, compute_);
  expect_linear_matches_host(linear, 70, 45, 37);
}

TEST_F(CudaLayers, LinearSlicesMatchTheHost) {
  const Linear whole("fc", 45, 37, compute_);
  // Column slices hold output rows; row slices input columns, the bias on tensor rank 0 alone.
  for (int rank = 0; rank < 2; ++rank) {
    SCOPED_TRACE("tensor rank " + std::to_string(rank));
    const auto column = whole.sliced(TensorParallelRole::column, {rank, 2});
    const auto [out_begin, out_end] = TensorSlice{rank, 2}.range_of(37);
    expect_linear_matches_host(*column, 70, 45, out_end - out_begin);
    const auto row = whole.sliced(TensorParallelRole::row, {rank, 2});
    const auto [in_begin, in_end] = TensorSlice{rank, 2}.range_of(45);
    expect_linear_matches_host(*row, 70, in_end - in_begin, 37);
  }
}

TEST_F(CudaLayers, LinearWithAnEmptyBatchGivesEmptyOutputsAndLeavesGradients) {
  const Linear linear("fc", 5, 3, compute_);
  const std::vector<Tensor> params = gpu_copies(random_params(linear, 1));
  const std::vector<Tensor> host_grads = random_params(linear, 5);
  const std::vector<Tensor> grads = gpu_copies(host_grads);
  LayerContext ctx;
  const Tensor y = linear.forward(on_gpu(Tensor({0, 5}, DType::f32)), views_of(params), ctx);
  EXPECT_EQ(y.shape(), (Shape{0, 3}));
  EXPECT_EQ(y.device(), Device::cuda(0));
  const Tensor dx =
      linear.backward(on_gpu(Tensor({0, 3}, DType::f32)), views_of(params), views_of(grads), ctx);
  EXPECT_EQ(dx.shape(), (Shape{0, 5}));
  expect_bitwise(grads[0], host_grads[0], "weight gradient");
  expect_bitwise(grads[1], host_grads[1], "bias gradient");
}

TEST_F(CudaLayers, BackwardSkipsTheInputGradientWhenNobodyNeedsIt) {
  const Linear linear("fc", 5, 3, compute_);
  const std::vector<Tensor> params = gpu_copies(random_params(linear, 1));
  const std::vector<Tensor> grads = zeros_like(linear.parameters(), true);
  LayerContext ctx;
  ctx.set_input_gradient_needed(false);
  (void)linear.forward(on_gpu(random_tensor({4, 5}, 3)), views_of(params), ctx);
  const Tensor dx =
      linear.backward(on_gpu(random_tensor({4, 3}, 4)), views_of(params), views_of(grads), ctx);
  EXPECT_EQ(dx.count(), 0U);
}

TEST_F(CudaLayers, ReluMatchesTheHostBitwise) {
  const Activation relu("act", ActivationKind::relu, compute_);
  const Tensor x = random_tensor({70, 33}, 5);
  const Tensor dy = random_tensor({70, 33}, 6);
  LayerContext host_ctx;
  LayerContext gpu_ctx;
  const Tensor host_y = relu.forward(x, {}, host_ctx);
  const Tensor gpu_y = relu.forward(on_gpu(x), {}, gpu_ctx);
  expect_bitwise(gpu_y, host_y, "relu forward");
  expect_bitwise(relu.backward(on_gpu(dy), {}, {}, gpu_ctx), relu.backward(dy, {}, {}, host_ctx),
                 "relu backward");
}

TEST_F(CudaLayers, GeluMatchesTheHost) {
  const Activation gelu("act", ActivationKind::gelu, compute_);
  const Tensor x = random_tensor({70, 33}, 5, 4.0F);
  const Tensor dy = random_tensor({70, 33}, 6);
  LayerContext host_ctx;
  LayerContext gpu_ctx;
  const Tensor host_y = gelu.forward(x, {}, host_ctx);
  const Tensor gpu_y = gelu.forward(on_gpu(x), {}, gpu_ctx);
  const Tensor host_dx = gelu.backward(dy, {}, {}, host_ctx);
  const Tensor gpu_dx = gelu.backward(on_gpu(dy), {}, {}, gpu_ctx);
  // CUDA's tanhf and glibc's each err by a few ulps of 1 (where 1 + tanh cancels), and nvcc may
  // fuse the polynomial's multiply-adds: absolute errors of a few 1e-7 times (1 + |x|), well
  // inside 1e-5 times that, while a wrong constant or a missing term is off by far more.
  Tensor scale = absolute(x);
  for (float& v : scale.as<float>()) v += 1.0F;
  expect_close(gpu_y, host_y, scale, 1e-5, "gelu forward");
  expect_close(gpu_dx, host_dx, scale, 1e-5, "gelu backward");
}

TEST_F(CudaLayers, ActivationsCoverTensorsLargerThanOneGridPass) {
  // More elements than the kernels' 65535 blocks of 256 threads cover at once.
  const std::size_t n = std::size_t{65535} * 256 + 1001;
  Tensor x({n}, DType::f32);
  auto values = x.as<float>();
  for (std::size_t i = 0; i < n; ++i) values[i] = (i % 7 == 0) ? -1.0F : static_cast<float>(i % 5);
  const Activation relu("act", ActivationKind::relu, compute_);
  LayerContext host_ctx;
  LayerContext gpu_ctx;
  expect_bitwise(relu.forward(on_gpu(x), {}, gpu_ctx), relu.forward(x, {}, host_ctx),
                 "relu forward over a large tensor");
}

TEST_F(CudaLayers, SoftmaxCrossEntropyMatchesTheHost) {
  constexpr std::size_t kRows = 70;
  constexpr std::size_t kClasses = 45;  // more than a warp: lanes loop over the classes
  const Tensor logits = random_tensor({kRows, kClasses}, 7, 3.0F);
  Tensor targets({kRows}, DType::i64);
  for (std::size_t r = 0; r < kRows; ++r) targets.as<std::int64_t>()[r] = (r * 7) % kClasses;
  const ComputeContext compute(1);
  const LossResult host = softmax_cross_entropy(logits, targets, kClasses, compute);
  // Targets may stay on the host or come along to the device.
  for (const bool targets_on_gpu : {false, true}) {
    SCOPED_TRACE(targets_on_gpu ? "targets on the gpu" : "targets on the host");
    const LossResult gpu = softmax_cross_entropy(
        on_gpu(logits), targets_on_gpu ? on_gpu(targets) : testing::copy_of(targets), kClasses,
        compute);
    // Both sum in double (the GPU in a shuffle tree, the host in row order); the host's
    // exponentials are float (layers/kernel_support.hpp), the GPU's double: parts in 1e9.
    EXPECT_NEAR(gpu.mean(), host.mean(), 1e-8 * host.mean());
    EXPECT_EQ(gpu.correct, host.correct);
    ASSERT_EQ(gpu.grad_logits.device(), Device::cuda(0));
    // The GPU's gradient is a double rounded to float, the host's a float exponential (a few
    // ulp of expf) times a float scale: a few float ulps apart.
    Tensor scale = absolute(host.grad_logits);
    expect_close(gpu.grad_logits, host.grad_logits, scale, 5e-7, "gradient");
  }
}

TEST_F(CudaLayers, SoftmaxCrossEntropyFindsTheFirstArgMaxAndStaysFinite) {
  // Ties: the first maximum counts, as on the host; huge logits must not overflow.
  Tensor logits({3, 40}, DType::f32);
  auto z = logits.as<float>();
  z[0 * 40 + 3] = 5.0F;
  z[0 * 40 + 35] = 5.0F;  // the later of two equal maxima, in another lane
  z[1 * 40 + 33] = 1e30F;
  z[2 * 40 + 0] = -1e30F;
  Tensor targets({3}, DType::i64);
  targets.as<std::int64_t>()[0] = 35;
  targets.as<std::int64_t>()[1] = 33;
  targets.as<std::int64_t>()[2] = 1;
  const ComputeContext compute(1);
  const LossResult host = softmax_cross_entropy(logits, targets, 40, compute);
  const LossResult gpu = softmax_cross_entropy(on_gpu(logits), targets, 40, compute);
  EXPECT_EQ(host.correct, 2U);  // rows 1 and 2; row 0's first maximum is class 3
  EXPECT_EQ(gpu.correct, host.correct);
  EXPECT_TRUE(std::isfinite(gpu.mean()));
  EXPECT_NEAR(gpu.mean(), host.mean(), 1e-8 * host.mean());  // float exponentials on the host
}

TEST_F(CudaLayers, SoftmaxCrossEntropyRejectsATargetOutsideTheClasses) {
  const ComputeContext compute(1);
  Tensor targets({2}, DType::i64);
  targets.as<std::int64_t>()[1] = 3;
  const Tensor logits = on_gpu(random_tensor({2, 3}, 1));
  for (const bool targets_on_gpu : {false, true}) {
    try {
      (void)softmax_cross_entropy(
          logits, targets_on_gpu ? on_gpu(targets) : testing::copy_of(targets), 3, compute);
      ADD_FAILURE() << "target 3 of 3 classes accepted";
    } catch (const InvalidArgument& e) {
      EXPECT_NE(std::string(e.what()).find("target 3 of row 1"), std::string::npos) << e.what();
    }
  }
}

TEST_F(CudaLayers, SoftmaxCrossEntropyOfAnEmptyBatchIsZero) {
  const ComputeContext compute(1);
  const LossResult result = softmax_cross_entropy(on_gpu(Tensor({0, 4}, DType::f32)),
                                                  Tensor({0}, DType::i64), 4, compute);
  EXPECT_EQ(result.mean(), 0.0);
  EXPECT_EQ(result.correct, 0U);
  EXPECT_EQ(result.grad_logits.shape(), (Shape{0, 4}));
  EXPECT_EQ(result.grad_logits.device(), Device::cuda(0));
}

TEST_F(CudaLayers, TwoRunsOfAStepGiveTheSameBits) {
  const Linear fc1("fc1", 45, 64, compute_);
  const Activation act("act", ActivationKind::gelu, compute_);
  const Linear fc2("fc2", 64, 10, compute_);
  const std::vector<Tensor> p1 = gpu_copies(random_params(fc1, 1));
  const std::vector<Tensor> p2 = gpu_copies(random_params(fc2, 3));
  const Tensor x = on_gpu(random_tensor({70, 45}, 5));
  Tensor targets({70}, DType::i64);
  for (std::size_t r = 0; r < 70; ++r) targets.as<std::int64_t>()[r] = r % 10;
  const ComputeContext compute(1);
  auto step = [&] {
    std::vector<Tensor> g1 = zeros_like(fc1.parameters(), true);
    std::vector<Tensor> g2 = zeros_like(fc2.parameters(), true);
    LayerContext c1;
    LayerContext ca;
    LayerContext c2;
    const Tensor h = fc1.forward(x, views_of(p1), c1);
    const Tensor a = act.forward(h, {}, ca);
    const Tensor logits = fc2.forward(a, views_of(p2), c2);
    LossResult loss = softmax_cross_entropy(logits, targets, 10, compute);
    const Tensor da = fc2.backward(loss.grad_logits, views_of(p2), views_of(g2), c2);
    const Tensor dh = act.backward(da, {}, {}, ca);
    (void)fc1.backward(dh, views_of(p1), views_of(g1), c1);
    std::vector<Tensor> out;
    for (auto& g : g1) out.push_back(std::move(g));
    for (auto& g : g2) out.push_back(std::move(g));
    out.push_back(std::move(loss.grad_logits));
    Tensor loss_value({1}, DType::f64);
    loss_value.as<double>()[0] = loss.mean();
    out.push_back(std::move(loss_value));
    return out;
  };
  const auto first = step();
  const auto second = step();
  ASSERT_EQ(first.size(), second.size());
  for (std::size_t i = 0; i < first.size(); ++i) {
    expect_bitwise(first[i], second[i], "result " + std::to_string(i));
  }
}

TEST_F(CudaLayers, RefusesParametersOnAnotherDeviceThanTheInput) {
  const Linear linear("fc", 5, 3, compute_);
  const std::vector<Tensor> host_params = random_params(linear, 1);
  const std::vector<Tensor> gpu_params = gpu_copies(host_params);
  LayerContext ctx;
  try {
    (void)linear.forward(on_gpu(random_tensor({4, 5}, 3)), views_of(host_params), ctx);
    ADD_FAILURE() << "host parameters accepted for a cuda:0 input";
  } catch (const InvalidArgument& e) {
    const std::string message = e.what();
    EXPECT_NE(message.find("fc.weight"), std::string::npos) << message;
    EXPECT_NE(message.find("is on cpu"), std::string::npos) << message;
    EXPECT_NE(message.find("cuda:0"), std::string::npos) << message;
  }
  EXPECT_THROW((void)linear.forward(random_tensor({4, 5}, 3), views_of(gpu_params), ctx),
               InvalidArgument);
}

TEST_F(CudaLayers, RefusesAnOutputGradientOnAnotherDeviceThanTheSavedInput) {
  const Linear linear("fc", 5, 3, compute_);
  const std::vector<Tensor> params = gpu_copies(random_params(linear, 1));
  const std::vector<Tensor> grads = zeros_like(linear.parameters(), true);
  LayerContext ctx;
  (void)linear.forward(on_gpu(random_tensor({4, 5}, 3)), views_of(params), ctx);
  EXPECT_THROW(
      (void)linear.backward(random_tensor({4, 3}, 4), views_of(params), views_of(grads), ctx),
      InvalidArgument);
  const Activation relu("act", ActivationKind::relu, compute_);
  LayerContext act_ctx;
  (void)relu.forward(on_gpu(random_tensor({4, 5}, 3)), {}, act_ctx);
  EXPECT_THROW((void)relu.backward(random_tensor({4, 5}, 4), {}, {}, act_ctx), InvalidArgument);
}

TEST_F(CudaLayers, RefusesAViewThatSaysCudaOverHostMemory) {
  const Linear linear("fc", 5, 3, compute_);
  const std::vector<Tensor> host_params = random_params(linear, 1);
  std::vector<BufferView> lying = views_of(host_params);
  for (BufferView& view : lying) view.device = Device::cuda(0);
  LayerContext ctx;
  try {
    (void)linear.forward(on_gpu(random_tensor({4, 5}, 3)), lying, ctx);
    ADD_FAILURE() << "host memory accepted as cuda:0 parameters";
  } catch (const InvalidArgument& e) {
    EXPECT_NE(std::string(e.what()).find("host memory"), std::string::npos) << e.what();
  }
}

// cuBLAS is loaded at run time (cublas_handle.hpp): the library the build found resolves every
// entry point the layers call, and its own names come back in tessera's errors. Loading and
// naming statuses need no GPU, so this runs everywhere tessera is built with CUDA.
TEST(CublasLoading, ResolvesEveryEntryPointAndNamesAStatusWithoutAGpu) {
  const tessera::cuda::CublasApi& api = tessera::cuda::cublas();
  EXPECT_NE(api.create, nullptr);
  EXPECT_NE(api.destroy, nullptr);
  EXPECT_NE(api.set_stream, nullptr);
  EXPECT_NE(api.set_math_mode, nullptr);
  EXPECT_NE(api.set_pointer_mode, nullptr);
  EXPECT_NE(api.status_name, nullptr);
  EXPECT_NE(api.status_string, nullptr);
  EXPECT_NE(api.sgemm, nullptr);
  EXPECT_EQ(&tessera::cuda::cublas(), &api) << "loaded once";
  EXPECT_TRUE(tessera::cuda::cublas_loaded());
  try {
    tessera::cuda::check(CUBLAS_STATUS_ALLOC_FAILED, "a test's GEMM on cuda:0");
    ADD_FAILURE() << "CUBLAS_STATUS_ALLOC_FAILED was not refused";
  } catch (const OutOfMemory& e) {
    EXPECT_NE(std::string(e.what()).find("a test's GEMM on cuda:0 failed, the device is out of "
                                         "memory (CUBLAS_STATUS_ALLOC_FAILED: "),
              std::string::npos)
        << e.what();
  }
  try {
    tessera::cuda::check(CUBLAS_STATUS_INVALID_VALUE, "a test's GEMM");
    ADD_FAILURE() << "CUBLAS_STATUS_INVALID_VALUE was not refused";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("(CUBLAS_STATUS_INVALID_VALUE: "), std::string::npos)
        << e.what();
  }
  tessera::cuda::check(CUBLAS_STATUS_SUCCESS, "nothing");
}

TEST(CudaLayersRefusal, AnInputOnADeviceThisProcessDoesNotSeeIsRefusedByName) {
  const int unseen = tessera::cuda::device_count();
  const std::string where = "cuda:" + std::to_string(unseen);
  const auto compute = std::make_shared<ComputeContext>(1);
  const auto device = std::make_shared<testing::UnseenDevice>(unseen);
  const Tensor input = random_tensor({4, 5}, 3).copy_to(device);
  const Linear linear("fc", 5, 3, compute);
  std::vector<Tensor> params;
  params.emplace_back(Shape{3, 5}, DType::f32, device);
  params.emplace_back(Shape{3}, DType::f32, device);
  LayerContext ctx;
  try {
    (void)linear.forward(input, views_of(params), ctx);
    ADD_FAILURE() << "an input on " << where << " was accepted";
  } catch (const InvalidArgument& e) {
    const std::string message = e.what();
    EXPECT_NE(message.find("fc"), std::string::npos) << message;
    EXPECT_NE(message.find(where), std::string::npos) << message;
  }
  const Activation relu("act", ActivationKind::relu, compute);
  EXPECT_THROW((void)relu.forward(input, {}, ctx), InvalidArgument);
  const ComputeContext loss_compute(1);
  EXPECT_THROW((void)softmax_cross_entropy(random_tensor({2, 10}, 1).copy_to(device),
                                           Tensor({2}, DType::i64), 10, loss_compute),
               InvalidArgument);
}

}  // namespace
}  // namespace tessera::layers
