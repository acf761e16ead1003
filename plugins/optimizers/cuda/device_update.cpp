// device_update.hpp over CUDA: the kernels of update_kernels.cu on the legacy default stream.
#include "device_update.hpp"

#include <cuda_runtime_api.h>

#include <string>

#include "cuda/cuda_device.hpp"
#include "cuda/cuda_error.hpp"
#include "cuda/cuda_memory.hpp"
#include "cuda/update_kernels.hpp"

namespace tessera::optimizers {
namespace {

// Launches on the step's device and waits for the default stream: step() returns with the
// update done, so the caller may read the parameters or hand them to any stream.
template <class Launch>
void launch_and_wait(const DeviceStep& step, const char* optimizer, const Launch& launch) {
  if (step.n == 0) return;
  const tessera::cuda::DeviceGuard on(step.device.index);
  const std::string what = std::string(optimizer) + " update of " + std::to_string(step.n) +
                           " parameters on " + to_string(step.device);
  tessera::cuda::check(launch(), "launching the " + what);
  tessera::cuda::check(cudaStreamSynchronize(nullptr), what);
}

}  // namespace

bool updates_on(Device device) noexcept {
  return device.type == DeviceType::cuda && device.index >= 0 &&
         device.index < tessera::cuda::device_count();
}

void require_device_memory(const BufferView& view, const std::string& what) {
  tessera::cuda::require_memory_on(view.device, view.data, what);
}

void sgd_update(const DeviceStep& step, const SgdScalars& scalars) {
  launch_and_wait(step, "sgd", [&] {
    return cuda::launch_sgd_update(scalars, step.params, step.grads, step.state, step.n);
  });
}

void adam_update(const DeviceStep& step, const AdamScalars& scalars) {
  launch_and_wait(step, scalars.decoupled ? "adamw" : "adam", [&] {
    return cuda::launch_adam_update(scalars, step.params, step.grads, step.state,
                                    step.state + step.slot_stride, step.n);
  });
}

void rmsprop_update(const DeviceStep& step, const RmspropScalars& scalars) {
  // The slots in rmsprop.hpp's order: s, then b with momentum, then a when centered.
  float* s = step.state;
  float* b = scalars.use_momentum ? s + step.slot_stride : nullptr;
  float* a = scalars.centered ? s + step.slot_stride * (scalars.use_momentum ? 2 : 1) : nullptr;
  launch_and_wait(step, "rmsprop", [&] {
    return cuda::launch_rmsprop_update(scalars, step.params, step.grads, s, b, a, step.n);
  });
}

}  // namespace tessera::optimizers
