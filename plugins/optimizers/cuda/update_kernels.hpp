#pragma once
// Launchers of the optimizers' element-wise kernels on the current device's legacy default
// stream. Plain over raw device pointers, so the .cu file needs no tessera header. Each returns
// the launch's status and does not wait.

#include <cuda_runtime_api.h>

#include <cstddef>

#include "update_scalars.hpp"

namespace tessera::optimizers::cuda {

// b is the momentum buffer, ignored when scalars.momentum == 0.
cudaError_t launch_sgd_update(const SgdScalars& scalars, float* p, const float* g, float* b,
                              std::size_t n);
cudaError_t launch_adam_update(const AdamScalars& scalars, float* p, const float* g, float* m,
                               float* v, std::size_t n);
// b is used only with momentum, a only when centered.
cudaError_t launch_rmsprop_update(const RmspropScalars& scalars, float* p, const float* g, float* s,
                                  float* b, float* a, std::size_t n);

}  // namespace tessera::optimizers::cuda
