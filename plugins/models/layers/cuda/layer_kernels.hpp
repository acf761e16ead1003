#pragma once
// Launchers of the reference layers' kernels on the current device's legacy default stream.
// Plain over raw device pointers, so the .cu file needs no tessera header. Each returns the
// launch's status and does not wait. Matrices are row-major.

#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>

namespace tessera::layers::cuda {

// y[r, c] = b[c] for every row r of y [rows, width].
cudaError_t launch_broadcast_rows(const float* b, float* y, std::size_t rows, std::size_t width);

// db[c] += dy[0, c] + dy[1, c] + ... + dy[rows - 1, c], one thread per column adding in row
// order: the bits of the host's loop.
cudaError_t launch_add_column_sums(const float* dy, float* db, std::size_t rows, std::size_t width);

cudaError_t launch_relu_forward(const float* x, float* y, std::size_t n);
// dx = dy where the forward output y > 0, else 0.
cudaError_t launch_relu_backward(const float* y, const float* dy, float* dx, std::size_t n);
// GELU, tanh approximation (PyTorch's approximate="tanh").
cudaError_t launch_gelu_forward(const float* x, float* y, std::size_t n);
// dx = dy * gelu'(x) (the Activation layer), or dx += dy * gelu'(x) (gelu.hpp's span kernel).
cudaError_t launch_gelu_backward(const float* x, const float* dy, float* dx, std::size_t n);
cudaError_t launch_gelu_backward_add(const float* x, const float* dy, float* dx, std::size_t n);

// target[i] += addend[i]: a residual stream joined by its branch.
cudaError_t launch_add(float* target, const float* addend, std::size_t n);

// One dropout call's mask (dropout.hpp): element i is kept when
// counter_uniform(seed, stream, first + i) >= p, and a kept value is scaled by `scale`, which the
// caller computes as the host does (1 / (1 - p) in float), as it does the stream.
struct DropoutDraw {
  float p = 0.0F;
  float scale = 1.0F;
  std::uint64_t seed = 0;
  std::uint64_t stream = 0;
  std::uint64_t first = 0;
};
// y = kept ? x * scale : 0 (y may be x); dx += kept ? dy * scale : 0.
cudaError_t launch_dropout_forward(const float* x, float* y, std::size_t n,
                                   const DropoutDraw& draw);
cudaError_t launch_dropout_backward(const float* dy, float* dx, std::size_t n,
                                    const DropoutDraw& draw);

// Per row r of logits z [rows, classes] with target t[r] in [0, classes) (checked by the caller):
// row_loss[r] = log sum_c exp(z[r, c] - max) + max - z[r, t[r]] in double, row_correct[r] = 1
// when the first arg-max is t[r], and grad[r, c] = (softmax - onehot) * inv_rows. One warp per
// row; its sums go through a fixed shuffle tree, so the bits never change from run to run.
cudaError_t launch_softmax_cross_entropy(const float* z, const std::int64_t* t, float* grad,
                                         double* row_loss, unsigned char* row_correct,
                                         std::size_t rows, std::size_t classes, double inv_rows);

}  // namespace tessera::layers::cuda
