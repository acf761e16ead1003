// device_update.hpp where tessera is built without CUDA: no device is updated, and step_device
// refuses device buffers before any of the updates below could be reached.
#include "device_update.hpp"
#include "tessera/base/error.hpp"

namespace tessera::optimizers {
namespace {

[[noreturn]] void no_device(const DeviceStep& step) {
  throw InvalidArgument(
      "this build of tessera has no CUDA support, so no optimizer updates "
      "buffers on " +
      to_string(step.device));
}

}  // namespace

bool updates_on(Device /*device*/) noexcept {
  return false;
}

void require_device_memory(const BufferView& view, const std::string& what) {
  throw InvalidArgument(what + " lives on " + to_string(view.device) +
                        ", and this build of tessera has no CUDA support");
}

void sgd_update(const DeviceStep& step, const SgdScalars& /*scalars*/) {
  no_device(step);
}
void adam_update(const DeviceStep& step, const AdamScalars& /*scalars*/) {
  no_device(step);
}
void rmsprop_update(const DeviceStep& step, const RmspropScalars& /*scalars*/) {
  no_device(step);
}

}  // namespace tessera::optimizers
