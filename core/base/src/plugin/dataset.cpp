#include "tessera/plugin/dataset.hpp"

#include <string>

namespace tessera {

std::string describe(const SampleLayout& layout) {
  const std::string targets = layout.target_shape.empty()
                                  ? std::string("one target")
                                  : shape_text(layout.target_shape) + " targets";
  return std::string(dtype_name(layout.input_dtype)) + " " + shape_text(layout.input_shape) +
         " in, " + targets + " of " + std::to_string(layout.classes) + " classes";
}

}  // namespace tessera
