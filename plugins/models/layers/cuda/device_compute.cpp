// device_compute.hpp over CUDA: cuBLAS for the GEMMs, layer_kernels.cu for the rest, all on the
// legacy default stream of the tensors' device.
#include "layers/device_compute.hpp"

#include <cublas_v2.h>
#include <cuda_runtime_api.h>

#include <climits>
#include <cstdint>
#include <string>

#include "cuda/cublas_handle.hpp"
#include "cuda/cuda_allocator.hpp"
#include "cuda/cuda_device.hpp"
#include "cuda/cuda_error.hpp"
#include "cuda/cuda_memory.hpp"
#include "layers/cuda/layer_kernels.hpp"
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

float* floats_of(Tensor& tensor) {
  return static_cast<float*>(tensor.view().data);
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
  check_launch(cuda::launch_add_column_sums(floats(dy), db, n, out), "bias gradient", device);
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

}  // namespace tessera::layers::device
