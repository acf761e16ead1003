#pragma once
// Argument checks the reference layers share: they turn a strategy's wiring mistake into an
// error naming the layer instead of a wild memory access.

#include <span>
#include <string>

#include "tessera/base/error.hpp"
#include "tessera/plugin/layer.hpp"

namespace tessera::layers {

// Checks that `views` match `specs` one to one (count, f32, cpu). A sliced layer's specs carry
// the slice's shape, so each view must hold exactly this rank's slice, not the whole parameter.
inline void check_views(const std::string& layer, std::span<const BufferView> views,
                        const std::vector<ParamSpec>& specs, const char* what) {
  TESSERA_CHECK(views.size() == specs.size(), layer + ": expected " + std::to_string(specs.size()) +
                                                  " " + what + " views, got " +
                                                  std::to_string(views.size()));
  for (std::size_t i = 0; i < specs.size(); ++i) {
    const std::size_t expected = element_count(specs[i].shape);
    TESSERA_CHECK(views[i].count == expected && views[i].dtype == DType::f32 &&
                      views[i].device == Device::cpu(),
                  layer + ": " + what + " view " + std::to_string(i) + " (" +
                      std::to_string(views[i].count) + " elements) does not match " +
                      specs[i].name + (specs[i].slice.whole() ? "" : " (this rank's slice)") +
                      ", which has " + std::to_string(expected) + " f32 cpu elements");
  }
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
