#pragma once
// Argument checks the reference layers share: they turn a strategy's wiring mistake into an
// error naming the layer instead of a wild memory access.

#include <span>
#include <string>

#include "layers/device_compute.hpp"
#include "tessera/base/error.hpp"
#include "tessera/plugin/layer.hpp"

namespace tessera::layers {

// The device a layer computes on: its input's, which must be the host or a device this build
// computes on (device_compute.hpp). Throws InvalidArgument naming the layer otherwise.
inline Device compute_device(const std::string& layer, const Tensor& input) {
  const Device device = input.device();
  if (device != Device::cpu()) device::require_computes_on(device, layer);
  return device;
}

// Checks that `views` match `specs` one to one (count, f32, on `device`). A sliced layer's specs
// carry the slice's shape, so each view must hold exactly this rank's slice, not the whole
// parameter. On a GPU each view's memory is checked to really lie there.
inline void check_views(const std::string& layer, std::span<const BufferView> views,
                        const std::vector<ParamSpec>& specs, const char* what, Device device) {
  TESSERA_CHECK(views.size() == specs.size(), layer + ": expected " + std::to_string(specs.size()) +
                                                  " " + what + " views, got " +
                                                  std::to_string(views.size()));
  for (std::size_t i = 0; i < specs.size(); ++i) {
    const std::size_t expected = element_count(specs[i].shape);
    TESSERA_CHECK(views[i].count == expected && views[i].dtype == DType::f32,
                  layer + ": " + what + " view " + std::to_string(i) + " (" +
                      std::to_string(views[i].count) + " elements) does not match " +
                      specs[i].name + (specs[i].slice.whole() ? "" : " (this rank's slice)") +
                      ", which has " + std::to_string(expected) + " f32 elements");
    if (views[i].device != device) {
      throw InvalidArgument(layer + ": " + what + " view " + std::to_string(i) + " (" +
                            specs[i].name + ") is on " + to_string(views[i].device) +
                            " but the layer computes on " + to_string(device) +
                            ", its input's device; keep a layer's tensors on one device");
    }
    if (device != Device::cpu() && expected > 0) {
      device::require_memory(views[i], layer + ": " + what + " view " + std::to_string(i) + " (" +
                                           specs[i].name + ")");
    }
  }
}

// Throws InvalidArgument unless `tensor` is on `device` (a gradient beside a saved input).
inline void check_same_device(const std::string& layer, const char* what, const Tensor& tensor,
                              Device device) {
  if (tensor.device() == device) return;
  throw InvalidArgument(layer + ": " + what + " is on " + to_string(tensor.device()) +
                        " but the layer computes on " + to_string(device) +
                        "; keep a layer's tensors on one device");
}

// Throws InvalidArgument, naming `kernel` and `what`, unless `view` holds exactly `expected` f32
// elements on `device` (on a GPU: in its memory). What the kernels over Tensors check before they
// hand raw pointers to a kernel of either side.
inline void check_floats(const std::string& kernel, const char* what, const BufferView& view,
                         std::size_t expected, Device device) {
  if (view.dtype != DType::f32 || view.count != expected) {
    throw InvalidArgument(kernel + ": " + what + " has " + std::to_string(view.count) + " " +
                          std::string(dtype_name(view.dtype)) + " elements, expected " +
                          std::to_string(expected) +
                          " f32 elements (see the layout in its header)");
  }
  if (view.device != device) {
    throw InvalidArgument(kernel + ": " + what + " is on " + to_string(view.device) +
                          " but the kernel computes on " + to_string(device) +
                          "; keep a layer's tensors on one device");
  }
  if (device != Device::cpu() && expected > 0) device::require_memory(view, kernel + ": " + what);
}

// Rows of `tensor` when read as a [rows, width] f32 matrix.
inline std::size_t rows_of(const std::string& layer, const Tensor& tensor, std::size_t width) {
  TESSERA_CHECK(tensor.dtype() == DType::f32, layer + ": expects f32 input");
  TESSERA_CHECK(!tensor.shape().empty() && width > 0 && tensor.count() == tensor.shape()[0] * width,
                layer + ": expects " + std::to_string(width) + " elements per row, got " +
                    std::to_string(tensor.count()) + " in total");
  return tensor.shape()[0];
}

}  // namespace tessera::layers
