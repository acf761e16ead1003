#include <string>

#include "tessera/plugin/checkpoint_io.hpp"

namespace tessera {

std::string slice_problem(const StateSlice& slice) {
  if (slice.param.empty() || slice.param.find('\n') != std::string::npos)
    return "names no parameter (an empty name or one with a newline)";
  if (slice.kind != StateKind::parameter && slice.kind != StateKind::optimizer_state)
    return "has an unknown kind";
  if (slice.kind == StateKind::parameter && slice.slot != 0)
    return "gives an optimizer slot for a parameter";
  const Shape shape = slice.shape.empty() ? Shape{1} : slice.shape;
  if (slice.dim >= shape.size()) {
    return "slices dimension " + std::to_string(slice.dim) + " of a parameter with " +
           std::to_string(shape.size());
  }
  if (slice.begin >= slice.end || slice.end > shape[slice.dim]) {
    return "takes [" + std::to_string(slice.begin) + ", " + std::to_string(slice.end) +
           ") of dimension " + std::to_string(slice.dim) + ", which has " +
           std::to_string(shape[slice.dim]) + " entries";
  }
  std::size_t box = slice.end - slice.begin;
  for (std::size_t d = 0; d < shape.size(); ++d) {
    if (d != slice.dim && __builtin_mul_overflow(box, shape[d], &box))
      return "has a shape whose element count overflows";
  }
  // The whole parameter's count must fit too: readers index it.
  std::size_t whole = 1;
  for (const auto extent : shape) {
    if (__builtin_mul_overflow(whole, extent, &whole))
      return "has a shape whose element count overflows";
  }
  if (slice.first >= slice.last || slice.last > box) {
    return "takes elements [" + std::to_string(slice.first) + ", " + std::to_string(slice.last) +
           ") of a slice of " + std::to_string(box);
  }
  return {};
}

std::string slice_blob_name(const StateSlice& slice) {
  std::string name = std::to_string(slice.layer) + "." + slice.param + "/";
  name += slice.kind == StateKind::parameter ? "parameter"
                                             : "optimizer_state" + std::to_string(slice.slot);
  name += "/d" + std::to_string(slice.dim) + "[" + std::to_string(slice.begin) + ":" +
          std::to_string(slice.end) + "]/e[" + std::to_string(slice.first) + ":" +
          std::to_string(slice.last) + "]";
  return name;
}

}  // namespace tessera
