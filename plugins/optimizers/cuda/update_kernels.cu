// The optimizers' updates, one thread per element. Each body is the host loop's, operation for
// operation; this file is compiled with --fmad=false, and nvcc's default sqrtf and division are
// IEEE round-to-nearest, so a device step writes the bits of a host step.
#include <algorithm>

#include "cuda/update_kernels.hpp"

namespace tessera::optimizers::cuda {
namespace {

constexpr unsigned kThreads = 256;
// Past this many blocks each thread loops (grid stride): enough to fill any current GPU.
constexpr std::size_t kMaxBlocks = 65535;

unsigned blocks_for(std::size_t n) {
  return static_cast<unsigned>(std::min<std::size_t>((n + kThreads - 1) / kThreads, kMaxBlocks));
}

__device__ std::size_t first_index() {
  return static_cast<std::size_t>(blockIdx.x) * blockDim.x + threadIdx.x;
}

__device__ std::size_t grid_stride() {
  return static_cast<std::size_t>(gridDim.x) * blockDim.x;
}

__global__ void sgd_kernel(SgdScalars k, float* p, const float* g, float* b, std::size_t n) {
  for (std::size_t i = first_index(); i < n; i += grid_stride()) {
    if (k.momentum == 0.0F) {
      p[i] -= k.lr * (g[i] + k.weight_decay * p[i]);
      continue;
    }
    const float d = g[i] + k.weight_decay * p[i];
    const float buf = k.first ? d : k.momentum * b[i] + k.keep * d;
    b[i] = buf;
    p[i] -= k.lr * (k.nesterov ? d + k.momentum * buf : buf);
  }
}

__global__ void adam_kernel(AdamScalars k, float* p, const float* g, float* m, float* v,
                            std::size_t n) {
  for (std::size_t i = first_index(); i < n; i += grid_stride()) {
    float pi = p[i];
    if (k.decoupled) pi *= k.decay;
    const float gi = g[i] + k.l2 * pi;
    const float mi = k.beta1 * m[i] + k.one_minus_b1 * gi;
    const float vi = k.beta2 * v[i] + k.one_minus_b2 * gi * gi;
    m[i] = mi;
    v[i] = vi;
    p[i] = pi - k.step_size * (mi / (sqrtf(vi) / k.bc2_sqrt + k.eps));
  }
}

__global__ void rmsprop_kernel(RmspropScalars k, float* p, const float* g, float* s, float* b,
                               float* a, std::size_t n) {
  for (std::size_t i = first_index(); i < n; i += grid_stride()) {
    const float gi = g[i] + k.weight_decay * p[i];
    const float si = k.alpha * s[i] + k.one_minus_alpha * gi * gi;
    s[i] = si;
    float d = 0.0F;
    if (k.centered) {
      const float ai = k.alpha * a[i] + k.one_minus_alpha * gi;
      a[i] = ai;
      d = sqrtf(si - ai * ai) + k.eps;
    } else {
      d = sqrtf(si) + k.eps;
    }
    if (k.use_momentum) {
      const float bi = k.momentum * b[i] + gi / d;
      b[i] = bi;
      p[i] -= k.lr * bi;
    } else {
      p[i] -= k.lr * (gi / d);
    }
  }
}

}  // namespace

cudaError_t launch_sgd_update(const SgdScalars& scalars, float* p, const float* g, float* b,
                              std::size_t n) {
  if (n == 0) return cudaSuccess;
  sgd_kernel<<<blocks_for(n), kThreads, 0, nullptr>>>(scalars, p, g, b, n);
  return cudaGetLastError();
}

cudaError_t launch_adam_update(const AdamScalars& scalars, float* p, const float* g, float* m,
                               float* v, std::size_t n) {
  if (n == 0) return cudaSuccess;
  adam_kernel<<<blocks_for(n), kThreads, 0, nullptr>>>(scalars, p, g, m, v, n);
  return cudaGetLastError();
}

cudaError_t launch_rmsprop_update(const RmspropScalars& scalars, float* p, const float* g, float* s,
                                  float* b, float* a, std::size_t n) {
  if (n == 0) return cudaSuccess;
  rmsprop_kernel<<<blocks_for(n), kThreads, 0, nullptr>>>(scalars, p, g, s, b, a, n);
  return cudaGetLastError();
}

}  // namespace tessera::optimizers::cuda
