// The reference layers' element-wise kernels and the softmax cross-entropy. Same formulas as the
// host code in ../activation.cpp and ../softmax_cross_entropy.cpp.
#include <algorithm>

#include "layers/cuda/layer_kernels.hpp"

namespace tessera::layers::cuda {
namespace {

constexpr unsigned kThreads = 256;
// Past this many blocks each thread loops (grid stride): enough to fill any current GPU.
constexpr std::size_t kMaxBlocks = 65535;
constexpr unsigned kWarp = 32;
constexpr unsigned kFullMask = 0xffffffffU;

constexpr float kSqrt2OverPi = 0.7978845608028654F;
constexpr float kGeluCubic = 0.044715F;

unsigned blocks_for(std::size_t n, std::size_t per_block = kThreads) {
  return static_cast<unsigned>(std::min<std::size_t>((n + per_block - 1) / per_block, kMaxBlocks));
}

__device__ std::size_t first_index() {
  return static_cast<std::size_t>(blockIdx.x) * blockDim.x + threadIdx.x;
}

__device__ std::size_t grid_stride() {
  return static_cast<std::size_t>(gridDim.x) * blockDim.x;
}

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

__global__ void gelu_backward_kernel(const float* x, const float* dy, float* dx, std::size_t n) {
  for (std::size_t i = first_index(); i < n; i += grid_stride()) {
    dx[i] = dy[i] * gelu_derivative(x[i]);
  }
}

// The warp's sum, the same tree every time, in every lane.
__device__ double warp_sum(double value) {
  for (unsigned offset = kWarp / 2; offset > 0; offset /= 2) {
    value += __shfl_down_sync(kFullMask, value, offset);
  }
  return __shfl_sync(kFullMask, value, 0);
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
    const double sum = warp_sum(partial);
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
  gelu_backward_kernel<<<blocks_for(n), kThreads, 0, nullptr>>>(x, dy, dx, n);
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
