#pragma once
// Deterministic parameter initialisation: the same bits for every strategy, whatever the
// sharding, because each element is a pure function of (seed, parameter index, element index).

#include <cstddef>
#include <cstdint>
#include <span>

#include "tessera/plugin/layer.hpp"

namespace tessera {

// Fills out with elements [offset, offset + out.size()) of parameter `param_index` (its position
// in FlatLayout::params: the model's ParamSpecs, a tied one only at its owner) initialised as
// spec.init says:
//   zeros, ones;
//   kaiming_uniform  U(-b, b), b = sqrt(6 / fan_in)             (He, gain sqrt(2): ReLU nets);
//   xavier_uniform   U(-b, b), b = sqrt(6 / (fan_in + fan_out)) (Glorot);
//   normal           N(0, init_std^2), Box-Muller over two counter uniforms (GPT-2: 0.02).
// For a slice (spec.slice) the elements are numbered within the slice and take the bits of the
// whole parameter at their place, so every tensor-parallel split starts from the same model.
// Throws InvalidArgument if spec.dtype is not f32, the range exceeds the parameter, a slice
// does not fit its whole shape, a fan needed by the init is zero, or normal's init_std is not
// positive.
void initialize_parameter(const ParamSpec& spec, std::uint64_t seed, std::size_t param_index,
                          std::span<float> out, std::size_t offset = 0);

}  // namespace tessera
