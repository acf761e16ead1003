#pragma once
// The optimizers' updates on a GPU. cuda/device_update.cpp implements this where tessera is built
// with CUDA, host_only_update.cpp (which runs on no device) elsewhere: CMake picks the file once,
// so no optimizer carries an #if.

#include <cstddef>
#include <string>

#include "tessera/base/buffer_view.hpp"
#include "update_scalars.hpp"

namespace tessera::optimizers {

// One step's buffers on one device, checked (step_checks.hpp): n parameters, as many gradients,
// the state slots slot-major, slot k of element i at state[k * slot_stride + i]. slot_stride is
// n for a whole step and larger for a part of one (segment_of: a run of one weight-decay rule).
struct DeviceStep {
  Device device;
  float* params = nullptr;
  const float* grads = nullptr;
  float* state = nullptr;
  std::size_t n = 0;
  std::size_t slot_stride = 0;
};

// Whether this build updates buffers on `device` (a CUDA device this process sees). Never throws.
[[nodiscard]] bool updates_on(Device device) noexcept;

// Throws InvalidArgument, naming `what`, unless the view's memory really is on its device (a view
// that says cuda:0 over host memory).
void require_device_memory(const BufferView& view, const std::string& what);

// Each launches one element-wise kernel on the device's default stream and returns once it has
// finished (Optimizer::step's contract). Same formulas and the same order of operations as the
// host loops, without fused multiply-adds, so a device step writes the bits a host step would.
// Throws Error when the launch fails.
void sgd_update(const DeviceStep& step, const SgdScalars& scalars);
void adam_update(const DeviceStep& step, const AdamScalars& scalars);
void rmsprop_update(const DeviceStep& step, const RmspropScalars& scalars);

}  // namespace tessera::optimizers
