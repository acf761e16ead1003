// device_compute.hpp over CUDA: cuBLAS for the GEMMs, layer_kernels.cu for the rest, all on the
// legacy default stream of the tensors' device.
#include "layers/device_compute.hpp"

#include <cublas_v2.h>
#include <cuda_runtime_api.h>

#include <algorithm>
#include <climits>
#include <cstdint>
#include <numeric>
#include <string>
#include <vector>

#include "cuda/cublas_handle.hpp"
#include "cuda/cuda_allocator.hpp"
#include "cuda/cuda_device.hpp"
#include "cuda/cuda_error.hpp"
#include "cuda/cuda_memory.hpp"
#include "layers/cuda/layer_kernels.hpp"
#include "layers/cuda/transformer_kernels.hpp"
#include "layers/softmax_cross_entropy.hpp"
#include "tessera/base/error.hpp"

namespace tessera::layers::device {
namespace {

Tensor f32_on(const Device& device, Shape shape) {
  return {std::move(shape), DType::f32, tessera::cuda::allocator_for(device.index)};
}

const float* floats(const Tensor& tensor) {
  return static_cast<const float*>(tensor.view().data);
}

float* floats_of(const Tensor& tensor) {
  return static_cast<float*>(tensor.view().data);
}

const std::int64_t* ids(const Tensor& tensor) {
  return static_cast<const std::int64_t*>(tensor.view().data);
}

// Host values as an i64 tensor on `device`.
Tensor ids_on(const Device& device, const std::vector<std::int64_t>& values) {
  Tensor host({values.size()}, DType::i64);
  std::copy(values.begin(), values.end(), host.as<std::int64_t>().begin());
  return host.copy_to(tessera::cuda::allocator_for(device.index));
}

// cuBLAS counts in int; a larger matrix is refused rather than wrapped.
int blas_int(std::size_t value, const char* what) {
  TESSERA_CHECK(value <= static_cast<std::size_t>(INT_MAX),
                std::string("a Linear's ") + what + " of " + std::to_string(value) +
                    " exceeds what one cuBLAS call takes");
  return static_cast<int>(value);
}

void check_launch(cudaError_t status, const char* kernel, const Device& device) {
  tessera::cuda::check(status, std::string("launching ") + kernel + " on " + to_string(device));
}

// Row-major [rows, cols] matrices are cuBLAS's column-major [cols, rows]: every product below is
// written for the transposes, C^T = op(B)^T op(A)^T, so no data moves.
void sgemm(const Device& device, cublasOperation_t op_a, cublasOperation_t op_b, std::size_t m,
           std::size_t n, std::size_t k, const float* a, std::size_t lda, const float* b,
           std::size_t ldb, float beta, float* c, std::size_t ldc, const char* what) {
  const float alpha = 1.0F;
  tessera::cuda::check(
      tessera::cuda::cublas().sgemm(tessera::cuda::cublas_handle(device.index), op_a, op_b,
                                    blas_int(m, "dimension"), blas_int(n, "dimension"),
                                    blas_int(k, "dimension"), &alpha, a, blas_int(lda, "row"), b,
                                    blas_int(ldb, "row"), &beta, c, blas_int(ldc, "row")),
      std::string(what) + " (cublasSgemm) on " + to_string(device));
}

}  // namespace

void require_computes_on(Device device, const std::string& layer) {
  if (device.type != DeviceType::cuda) {
    throw InvalidArgument(layer + ": cannot compute on " + to_string(device));
  }
  const int visible = tessera::cuda::device_count();
  if (device.index < 0 || device.index >= visible) {
    throw InvalidArgument(layer + ": its buffers are on " + to_string(device) +
                          ", a device this process does not see (it sees " +
                          std::to_string(visible) + " CUDA devices)");
  }
}

void require_memory(const BufferView& view, const std::string& what) {
  tessera::cuda::require_memory_on(view.device, view.data, what);
}

Tensor linear_forward(const Tensor& x, const float* w, const float* b, std::size_t in,
                      std::size_t out, bool add_bias) {
  const Device device = x.device();
  const tessera::cuda::DeviceGuard on(device.index);
  const std::size_t n = x.shape()[0];
  Tensor y = f32_on(device, {n, out});
  if (n == 0) return y;
  // y starts at the bias and the GEMM adds x w^T (beta = 1), as on the host.
  if (add_bias) check_launch(cuda::launch_broadcast_rows(b, floats_of(y), n, out), "bias", device);
  // y^T [out, n] = w [out, in] . x^T [in, n]; w is column-major [in, out], hence op T.
  sgemm(device, CUBLAS_OP_T, CUBLAS_OP_N, out, n, in, w, in, floats(x), in, add_bias ? 1.0F : 0.0F,
        floats_of(y), out, "Linear forward");
  return y;
}

void linear_backward_params(const Tensor& x, const Tensor& dy, float* dw, float* db, std::size_t in,
                            std::size_t out) {
  const Device device = x.device();
  const tessera::cuda::DeviceGuard on(device.index);
  const std::size_t n = x.shape()[0];
  if (n == 0) return;
  // dw^T [in, out] += x^T [in, n] . dy [n, out]; dy is column-major [out, n], hence op T.
  sgemm(device, CUBLAS_OP_N, CUBLAS_OP_T, in, out, n, floats(x), in, floats(dy), out, 1.0F, dw, in,
        "Linear weight gradient");
  if (db != nullptr) {
    check_launch(cuda::launch_add_column_sums(floats(dy), db, n, out), "bias gradient", device);
  }
}

Tensor linear_backward_input(const Tensor& dy, const float* w, std::size_t in, std::size_t out) {
  const Device device = dy.device();
  const tessera::cuda::DeviceGuard on(device.index);
  const std::size_t n = dy.shape()[0];
  Tensor dx = f32_on(device, {n, in});
  if (n == 0) return dx;
  // dx^T [in, n] = w^T [in, out] . dy^T [out, n]: both as they lie, column-major.
  sgemm(device, CUBLAS_OP_N, CUBLAS_OP_N, in, n, out, w, in, floats(dy), out, 0.0F, floats_of(dx),
        in, "Linear input gradient");
  return dx;
}

Tensor activation_forward(ActivationKind kind, const Tensor& x) {
  const Device device = x.device();
  const tessera::cuda::DeviceGuard on(device.index);
  Tensor y = f32_on(device, x.shape());
  const cudaError_t status = kind == ActivationKind::relu
                                 ? cuda::launch_relu_forward(floats(x), floats_of(y), x.count())
                                 : cuda::launch_gelu_forward(floats(x), floats_of(y), x.count());
  check_launch(status, "activation forward", device);
  return y;
}

Tensor activation_backward(ActivationKind kind, const Tensor& saved, const Tensor& dy) {
  const Device device = saved.device();
  const tessera::cuda::DeviceGuard on(device.index);
  Tensor dx = f32_on(device, saved.shape());
  const cudaError_t status =
      kind == ActivationKind::relu
          ? cuda::launch_relu_backward(floats(saved), floats(dy), floats_of(dx), saved.count())
          : cuda::launch_gelu_backward(floats(saved), floats(dy), floats_of(dx), saved.count());
  check_launch(status, "activation backward", device);
  return dx;
}

LossResult softmax_cross_entropy(const Tensor& logits, const Tensor& targets, std::size_t classes) {
  const Device device = logits.device();
  const tessera::cuda::DeviceGuard on(device.index);
  const auto device_allocator = tessera::cuda::allocator_for(device.index);
  const std::size_t n = loss_rows(logits, classes);
  // The targets on both sides: the host checks them (and names a bad one), the kernel reads them.
  Tensor host_targets = targets.copy_to(cpu_allocator());
  LossResult result;
  result.targets = counted_targets(host_targets.as<std::int64_t>(), classes);
  result.grad_logits = f32_on(device, logits.shape());
  if (result.targets == 0) return result;
  const Tensor device_targets =
      targets.device() == device ? targets.alias() : host_targets.copy_to(device_allocator);
  Tensor row_loss({n}, DType::f64, device_allocator);
  Tensor row_correct({n}, DType::u8, device_allocator);
  const double inv_targets = 1.0 / static_cast<double>(result.targets);
  check_launch(cuda::launch_softmax_cross_entropy(
                   floats(logits), static_cast<const std::int64_t*>(device_targets.view().data),
                   floats_of(result.grad_logits), static_cast<double*>(row_loss.view().data),
                   static_cast<unsigned char*>(row_correct.view().data), n, classes, inv_targets),
               "softmax cross-entropy", device);
  // The copies wait for the kernel; the rows are then summed in order, as on the host.
  const Tensor losses = row_loss.copy_to(cpu_allocator());
  const Tensor correct = row_correct.copy_to(cpu_allocator());
  const auto loss_of = losses.as<double>();
  const auto correct_of = correct.as<std::uint8_t>();
  for (std::size_t r = 0; r < n; ++r) {
    result.loss_sum += loss_of[r];
    result.correct += correct_of[r];
  }
  return result;
}

Tensor embedding_forward(const Tensor& tokens, std::span<const std::int64_t> host_tokens,
                         const float* token_table, const float* position_table,
                         const EmbeddingShape& shape, Device device) {
  const tessera::cuda::DeviceGuard on(device.index);
  Tensor output = f32_on(device, {shape.batch, shape.time, shape.channels});
  if (host_tokens.empty()) return output;
  // The kernel reads the ids where they already are, or from a copy of the host's. A temporary
  // freed here goes back to the pool after the kernel (stream order).
  const Tensor device_tokens = tokens.device() == device
                                   ? tokens.alias()
                                   : tokens.copy_to(tessera::cuda::allocator_for(device.index));
  check_launch(cuda::launch_embedding_forward(ids(device_tokens), token_table, position_table,
                                              floats_of(output), host_tokens.size(), shape.time,
                                              shape.channels),
               "embedding forward", device);
  return output;
}

void embedding_backward(float* grad_token_table, float* grad_position_table,
                        const Tensor& grad_output, std::span<const std::int64_t> host_tokens,
                        const EmbeddingShape& shape) {
  const Device device = grad_output.device();
  const tessera::cuda::DeviceGuard on(device.index);
  const std::size_t n = host_tokens.size();
  if (n == 0) return;
  // The token indices grouped by id, each group in increasing order (a stable sort), and where
  // each group starts.
  std::vector<std::int64_t> order(n);
  std::iota(order.begin(), order.end(), std::int64_t{0});
  std::stable_sort(order.begin(), order.end(), [&](std::int64_t a, std::int64_t b) {
    return host_tokens[static_cast<std::size_t>(a)] < host_tokens[static_cast<std::size_t>(b)];
  });
  std::vector<std::int64_t> rows;
  std::vector<std::int64_t> start;
  for (std::size_t k = 0; k < n; ++k) {
    const std::int64_t id = host_tokens[static_cast<std::size_t>(order[k])];
    if (rows.empty() || rows.back() != id) {
      rows.push_back(id);
      start.push_back(static_cast<std::int64_t>(k));
    }
  }
  start.push_back(static_cast<std::int64_t>(n));
  const Tensor device_rows = ids_on(device, rows);
  const Tensor device_start = ids_on(device, start);
  const Tensor device_order = ids_on(device, order);
  const cuda::TokenSegments segments{ids(device_rows), ids(device_start), ids(device_order),
                                     rows.size()};
  check_launch(
      cuda::launch_embedding_backward(segments, floats(grad_output), grad_token_table,
                                      grad_position_table, shape.batch, shape.time, shape.channels),
      "embedding backward", device);
}

LayerNormOutput layer_norm_forward(const Tensor& input, const float* weight, const float* bias,
                                   std::size_t rows, std::size_t channels) {
  const Device device = input.device();
  const tessera::cuda::DeviceGuard on(device.index);
  LayerNormOutput result{f32_on(device, input.shape()), f32_on(device, {rows}),
                         f32_on(device, {rows})};
  check_launch(cuda::launch_layer_norm_forward(
                   floats(input), weight, bias, floats_of(result.output), floats_of(result.mean),
                   floats_of(result.rstd), rows, channels, static_cast<float>(kLayerNormEps)),
               "layer norm forward", device);
  return result;
}

void layer_norm_backward(const Tensor& grad_input, float* grad_weight, float* grad_bias,
                         const Tensor& grad_output, const Tensor& input, const float* weight,
                         const Tensor& mean, const Tensor& rstd, std::size_t rows,
                         std::size_t channels) {
  const Device device = input.device();
  const tessera::cuda::DeviceGuard on(device.index);
  if (rows == 0) return;
  const Tensor partials = f32_on(device, {2 * cuda::layer_norm_partials(rows) * channels});
  check_launch(
      cuda::launch_layer_norm_backward(floats(grad_output), floats(input), weight, floats(mean),
                                       floats(rstd), floats_of(grad_input), grad_weight, grad_bias,
                                       floats_of(partials), rows, channels),
      "layer norm backward", device);
}

void gelu_backward(const Tensor& grad_input, const Tensor& grad_output, const Tensor& input) {
  const Device device = input.device();
  const tessera::cuda::DeviceGuard on(device.index);
  check_launch(cuda::launch_gelu_backward_add(floats(input), floats(grad_output),
                                              floats_of(grad_input), input.count()),
               "gelu backward", device);
}

namespace {

cuda::AttentionDims attention_dims(const AttentionShape& shape) {
  // Past these the kernels' per-thread rows (head size) or one grid's rows of blocks (time) end.
  if (shape.head_size > cuda::kMaxAttentionHeadSize) {
    throw InvalidArgument("causal_attention: a head size of " + std::to_string(shape.head_size) +
                          " is above the " + std::to_string(cuda::kMaxAttentionHeadSize) +
                          " the GPU kernels take; use more heads of at most " +
                          std::to_string(cuda::kMaxAttentionHeadSize) + " channels each");
  }
  constexpr std::size_t kLongest = std::size_t{65535} * 32;
  if (shape.time > kLongest) {
    throw InvalidArgument("causal_attention: a sequence of " + std::to_string(shape.time) +
                          " tokens is longer than the " + std::to_string(kLongest) +
                          " the GPU kernels take");
  }
  return {shape.batch, shape.time, shape.heads, shape.head_size};
}

}  // namespace

AttentionOutput causal_attention_forward(const Tensor& qkv, const AttentionShape& shape) {
  const cuda::AttentionDims dims = attention_dims(shape);
  const Device device = qkv.device();
  const tessera::cuda::DeviceGuard on(device.index);
  AttentionOutput result{f32_on(device, {shape.batch, shape.time, shape.channels()}),
                         f32_on(device, {shape.batch, shape.heads, shape.time})};
  check_launch(cuda::launch_causal_attention_forward(floats(qkv), floats_of(result.output),
                                                     floats_of(result.log_sum_exp), dims),
               "causal attention forward", device);
  return result;
}

void causal_attention_backward(const Tensor& grad_qkv, const Tensor& grad_output, const Tensor& qkv,
                               const Tensor& output, const Tensor& log_sum_exp,
                               const AttentionShape& shape) {
  const cuda::AttentionDims dims = attention_dims(shape);
  const Device device = qkv.device();
  const tessera::cuda::DeviceGuard on(device.index);
  const Tensor row_terms = f32_on(device, {shape.batch * shape.heads * shape.time});
  check_launch(cuda::launch_causal_attention_backward(
                   floats(qkv), floats(output), floats(grad_output), floats(log_sum_exp),
                   floats_of(row_terms), floats_of(grad_qkv), dims),
               "causal attention backward", device);
}

namespace {

// Both tensors f32 of one count on one CUDA device this build computes on.
void check_pair(const char* kernel, const Tensor& a, const Tensor& b) {
  require_computes_on(a.device(), kernel);
  TESSERA_CHECK(a.dtype() == DType::f32 && b.dtype() == DType::f32 && a.count() == b.count(),
                std::string(kernel) + ": expects two f32 tensors of one size, got " +
                    std::string(dtype_name(a.dtype())) + " " + shape_text(a.shape()) + " and " +
                    std::string(dtype_name(b.dtype())) + " " + shape_text(b.shape()));
  if (b.device() != a.device()) {
    throw InvalidArgument(std::string(kernel) + ": one tensor is on " + to_string(a.device()) +
                          " and the other on " + to_string(b.device()) +
                          "; keep a layer's tensors on one device");
  }
}

cuda::DropoutDraw draw_of(float p, const DropoutKey& key) {
  check_dropout_rate(p);
  // dropout.hpp's scale and stream, computed as the host computes them.
  return {p, 1.0F / (1.0F - p), key.seed, dropout_stream(key), key.first};
}

}  // namespace

void add_into(const Tensor& target, const Tensor& addend) {
  check_pair("residual add", target, addend);
  const tessera::cuda::DeviceGuard on(target.device().index);
  check_launch(cuda::launch_add(floats_of(target), floats(addend), target.count()), "residual add",
               target.device());
}

void dropout_forward(const Tensor& output, const Tensor& input, float p, const DropoutKey& key) {
  check_pair("dropout", output, input);
  const tessera::cuda::DeviceGuard on(input.device().index);
  check_launch(cuda::launch_dropout_forward(floats(input), floats_of(output), input.count(),
                                            draw_of(p, key)),
               "dropout forward", input.device());
}

void dropout_backward(const Tensor& grad_input, const Tensor& grad_output, float p,
                      const DropoutKey& key) {
  check_pair("dropout", grad_input, grad_output);
  const tessera::cuda::DeviceGuard on(grad_output.device().index);
  check_launch(cuda::launch_dropout_backward(floats(grad_output), floats_of(grad_input),
                                             grad_output.count(), draw_of(p, key)),
               "dropout backward", grad_output.device());
}

}  // namespace tessera::layers::device
