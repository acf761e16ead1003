// The reference layers' element-wise kernels, dropout and the softmax cross-entropy. Same
// formulas as the host code in ../activation.cpp, ../gelu.hpp, ../dropout.hpp and
// ../softmax_cross_entropy.cpp.
#include "layers/cuda/kernel_support.cuh"
#include "layers/cuda/layer_kernels.hpp"
#include "tessera/base/random.hpp"

namespace tessera::layers::cuda {
namespace {

constexpr float kSqrt2OverPi = 0.7978845608028654F;
constexpr float kGeluCubic = 0.044715F;

__global__ void broadcast_rows_kernel(const float* b, float* y, std::size_t rows,
                                      std::size_t width) {
  const std::size_t n = rows * width;
  for (std::size_t i = first_index(); i < n; i += grid_stride()) y[i] = b[i % width];
}

__global__ void add_column_sums_kernel(const float* dy, float* db, std::size_t rows,
                                       std::size_t width) {
  for (std::size_t c = first_index(); c < width; c += grid_stride()) {
    float sum = db[c];
    for (std::size_t r = 0; r < rows; ++r) sum += dy[r * width + c];
    db[c] = sum;
  }
}

__global__ void relu_forward_kernel(const float* x, float* y, std::size_t n) {
  for (std::size_t i = first_index(); i < n; i += grid_stride()) y[i] = x[i] > 0.0F ? x[i] : 0.0F;
}

__global__ void relu_backward_kernel(const float* y, const float* dy, float* dx, std::size_t n) {
  for (std::size_t i = first_index(); i < n; i += grid_stride()) {
    dx[i] = y[i] > 0.0F ? dy[i] : 0.0F;
  }
}

__device__ float gelu(float x) {
  const float t = tanhf(kSqrt2OverPi * (x + kGeluCubic * x * x * x));
  return 0.5F * x * (1.0F + t);
}

__device__ float gelu_derivative(float x) {
  const float t = tanhf(kSqrt2OverPi * (x + kGeluCubic * x * x * x));
  const float inner = kSqrt2OverPi * (1.0F + 3.0F * kGeluCubic * x * x);
  return 0.5F * (1.0F + t) + 0.5F * x * (1.0F - t * t) * inner;
}

__global__ void gelu_forward_kernel(const float* x, float* y, std::size_t n) {
  for (std::size_t i = first_index(); i < n; i += grid_stride()) y[i] = gelu(x[i]);
}

// kAdd: dx += (the span kernels' contract, gelu.hpp), else dx = (the Activation layer's).
template <bool kAdd>
__global__ void gelu_backward_kernel(const float* x, const float* dy, float* dx, std::size_t n) {
  for (std::size_t i = first_index(); i < n; i += grid_stride()) {
    const float g = dy[i] * gelu_derivative(x[i]);
    dx[i] = kAdd ? dx[i] + g : g;
  }
}

__global__ void add_kernel(float* target, const float* addend, std::size_t n) {
  for (std::size_t i = first_index(); i < n; i += grid_stride()) target[i] += addend[i];
}

// dropout.hpp's draw: counter_uniform is integer arithmetic and one exact conversion, so the
// device keeps exactly the elements the host keeps, and x * scale is one rounding on both.
__device__ bool keeps(std::uint64_t seed, std::uint64_t stream, std::uint64_t element, float p) {
  return counter_uniform(seed, stream, element) >= p;
}

__global__ void dropout_forward_kernel(const float* x, float* y, std::size_t n, float p,
                                       float scale, std::uint64_t seed, std::uint64_t stream,
                                       std::uint64_t first) {
  for (std::size_t i = first_index(); i < n; i += grid_stride()) {
    y[i] = keeps(seed, stream, first + i, p) ? x[i] * scale : 0.0F;
  }
}

__global__ void dropout_backward_kernel(const float* dy, float* dx, std::size_t n, float p,
                                        float scale, std::uint64_t seed, std::uint64_t stream,
                                        std::uint64_t first) {
  for (std::size_t i = first_index(); i < n; i += grid_stride()) {
    // Rounded as the host rounds (a product, then a sum), never fused into one multiply-add.
    if (keeps(seed, stream, first + i, p)) dx[i] = __fadd_rn(dx[i], __fmul_rn(dy[i], scale));
  }
}

// Each warp owns rows warp, warp + warps, ...; lane l owns classes l, l + 32, ...
__global__ void softmax_cross_entropy_kernel(const float* z, const std::int64_t* t, float* grad,
                                             double* row_loss, unsigned char* row_correct,
                                             std::size_t rows, std::size_t classes,
                                             double inv_targets) {
  const unsigned lane = threadIdx.x % kWarp;
  const std::size_t warps = grid_stride() / kWarp;
  for (std::size_t r = first_index() / kWarp; r < rows; r += warps) {
    const float* row = z + r * classes;
    if (t[r] < 0) {  // kIgnoreTarget: no loss, no count, no gradient
      for (std::size_t c = lane; c < classes; c += kWarp) grad[r * classes + c] = 0.0F;
      if (lane == 0) {
        row_loss[r] = 0.0;
        row_correct[r] = 0;
      }
      continue;
    }
    // The first arg-max, as the host's strict `>` scan finds it: ties go to the lower index.
    std::size_t arg_max = lane < classes ? lane : 0;
    for (std::size_t c = lane + kWarp; c < classes; c += kWarp) {
      if (row[c] > row[arg_max]) arg_max = c;
    }
    for (unsigned offset = kWarp / 2; offset > 0; offset /= 2) {
      const std::size_t other = __shfl_down_sync(kFullMask, arg_max, offset);
      if (row[other] > row[arg_max] || (row[other] == row[arg_max] && other < arg_max)) {
        arg_max = other;
      }
    }
    arg_max = __shfl_sync(kFullMask, arg_max, 0);
    const double shift = row[arg_max];
    double partial = 0.0;
    for (std::size_t c = lane; c < classes; c += kWarp) {
      partial += exp(static_cast<double>(row[c]) - shift);
    }
    const double sum = warp_sum<double>(partial);
    const auto target = static_cast<std::size_t>(t[r]);
    if (lane == 0) {
      row_loss[r] = log(sum) + shift - static_cast<double>(row[target]);
      row_correct[r] = arg_max == target ? 1 : 0;
    }
    float* g = grad + r * classes;
    for (std::size_t c = lane; c < classes; c += kWarp) {
      const double p = exp(static_cast<double>(row[c]) - shift) / sum;
      g[c] = static_cast<float>((c == target ? p - 1.0 : p) * inv_targets);
    }
  }
}

}  // namespace

cudaError_t launch_broadcast_rows(const float* b, float* y, std::size_t rows, std::size_t width) {
  if (rows * width == 0) return cudaSuccess;
  broadcast_rows_kernel<<<blocks_for(rows * width), kThreads, 0, nullptr>>>(b, y, rows, width);
  return cudaGetLastError();
}

cudaError_t launch_add_column_sums(const float* dy, float* db, std::size_t rows,
                                   std::size_t width) {
  if (rows * width == 0) return cudaSuccess;
  add_column_sums_kernel<<<blocks_for(width), kThreads, 0, nullptr>>>(dy, db, rows, width);
  return cudaGetLastError();
}

cudaError_t launch_relu_forward(const float* x, float* y, std::size_t n) {
  if (n == 0) return cudaSuccess;
  relu_forward_kernel<<<blocks_for(n), kThreads, 0, nullptr>>>(x, y, n);
  return cudaGetLastError();
}

cudaError_t launch_relu_backward(const float* y, const float* dy, float* dx, std::size_t n) {
  if (n == 0) return cudaSuccess;
  relu_backward_kernel<<<blocks_for(n), kThreads, 0, nullptr>>>(y, dy, dx, n);
  return cudaGetLastError();
}

cudaError_t launch_gelu_forward(const float* x, float* y, std::size_t n) {
  if (n == 0) return cudaSuccess;
  gelu_forward_kernel<<<blocks_for(n), kThreads, 0, nullptr>>>(x, y, n);
  return cudaGetLastError();
}

cudaError_t launch_gelu_backward(const float* x, const float* dy, float* dx, std::size_t n) {
  if (n == 0) return cudaSuccess;
  gelu_backward_kernel<false><<<blocks_for(n), kThreads, 0, nullptr>>>(x, dy, dx, n);
  return cudaGetLastError();
}

cudaError_t launch_gelu_backward_add(const float* x, const float* dy, float* dx, std::size_t n) {
  if (n == 0) return cudaSuccess;
  gelu_backward_kernel<true><<<blocks_for(n), kThreads, 0, nullptr>>>(x, dy, dx, n);
  return cudaGetLastError();
}

cudaError_t launch_add(float* target, const float* addend, std::size_t n) {
  if (n == 0) return cudaSuccess;
  add_kernel<<<blocks_for(n), kThreads, 0, nullptr>>>(target, addend, n);
  return cudaGetLastError();
}

cudaError_t launch_dropout_forward(const float* x, float* y, std::size_t n,
                                   const DropoutDraw& draw) {
  if (n == 0) return cudaSuccess;
  dropout_forward_kernel<<<blocks_for(n), kThreads, 0, nullptr>>>(
      x, y, n, draw.p, draw.scale, draw.seed, draw.stream, draw.first);
  return cudaGetLastError();
}

cudaError_t launch_dropout_backward(const float* dy, float* dx, std::size_t n,
                                    const DropoutDraw& draw) {
  if (n == 0) return cudaSuccess;
  dropout_backward_kernel<<<blocks_for(n), kThreads, 0, nullptr>>>(
      dy, dx, n, draw.p, draw.scale, draw.seed, draw.stream, draw.first);
  return cudaGetLastError();
}

cudaError_t launch_softmax_cross_entropy(const float* z, const std::int64_t* t, float* grad,
                                         double* row_loss, unsigned char* row_correct,
                                         std::size_t rows, std::size_t classes, double inv_rows) {
  if (rows == 0) return cudaSuccess;
  softmax_cross_entropy_kernel<<<blocks_for(rows, kThreads / kWarp), kThreads, 0, nullptr>>>(
      z, t, grad, row_loss, row_correct, rows, classes, inv_rows);
  return cudaGetLastError();
}

}  // namespace tessera::layers::cuda
