#pragma once
// The ParamSpecs of a transformer's three kinds of parameter, with GPT-2's initialisation and
// nanoGPT's weight-decay rule (docs/models.md, "Optimizers"): a matrix decays; a norm's gain or
// bias and a lookup table do not (decay would pull a gain to zero and shrink the rows of rare
// tokens for nothing). Fans are the whole parameter's, so a slice initialises to the whole's bits.

#include <cstddef>
#include <string>
#include <utility>

#include "tessera/plugin/layer.hpp"

namespace tessera::layers {

// A weight matrix [out, in] (or any shape: fan_in is the last dimension), normal(0, std_dev).
inline ParamSpec matrix_parameter(std::string name, Shape shape, float std_dev) {
  ParamSpec spec{std::move(name), std::move(shape), DType::f32, ParamInit::normal};
  spec.fan_in = spec.shape.back();
  spec.fan_out = spec.shape.front();
  spec.init_std = std_dev;
  return spec;
}

// A layer norm's gain (ParamInit::ones) or bias (ParamInit::zeros) of `width`: never decayed.
inline ParamSpec norm_parameter(std::string name, std::size_t width, ParamInit init) {
  ParamSpec spec{std::move(name), {width}, DType::f32, init, width, width, {}};
  spec.weight_decay = false;
  return spec;
}

// A table of vectors looked up by token or position, normal(0, std_dev): not decayed.
inline ParamSpec table_parameter(std::string name, Shape shape, float std_dev) {
  ParamSpec spec = matrix_parameter(std::move(name), std::move(shape), std_dev);
  spec.weight_decay = false;
  return spec;
}

}  // namespace tessera::layers
