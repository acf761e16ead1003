#pragma once
// What the reference layers' CUDA kernels share: the launch shape of element-wise kernels, the
// storage type's conversions, and fixed-order reductions. Included by the .cu files only.

#include <cuda_runtime_api.h>

#include <algorithm>
#include <cstddef>

namespace tessera::layers::cuda {

inline constexpr unsigned kThreads = 256;
// Past this many blocks each thread loops (grid stride): enough to fill any current GPU.
inline constexpr std::size_t kMaxBlocks = 65535;
inline constexpr unsigned kWarp = 32;
inline constexpr unsigned kFullMask = 0xffffffffU;

inline unsigned blocks_for(std::size_t n, std::size_t per_block = kThreads) {
  return static_cast<unsigned>(std::min<std::size_t>((n + per_block - 1) / per_block, kMaxBlocks));
}

__device__ inline std::size_t first_index() {
  return static_cast<std::size_t>(blockIdx.x) * blockDim.x + threadIdx.x;
}

__device__ inline std::size_t grid_stride() {
  return static_cast<std::size_t>(gridDim.x) * blockDim.x;
}

// How a kernel reads and writes its storage type T: every kernel computes in float (or double
// for the loss's sums) and converts at the loads and stores, so that a bf16 copy of a kernel is
// one more specialisation here and an instantiation, not another kernel. Only float is
// instantiated today.
template <class T>
struct Storage;

template <>
struct Storage<float> {
  __device__ static float load(const float* p) { return *p; }
  __device__ static void store(float* p, float v) { *p = v; }
};

// The sum over the warp's 32 lanes, through the same shuffle tree every time, in every lane.
template <class Real>
__device__ inline Real warp_sum(Real value) {
  for (unsigned offset = kWarp / 2; offset > 0; offset /= 2) {
    value += __shfl_down_sync(kFullMask, value, offset);
  }
  return __shfl_sync(kFullMask, value, 0);
}

}  // namespace tessera::layers::cuda
