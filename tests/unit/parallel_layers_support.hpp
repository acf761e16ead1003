#pragma once
// Shared by the tensor-parallel and pipeline tests: an mlp's whole parameters, and the slice of
// them that a rank computes with through the layer runner.

#include <cstring>
#include <limits>
#include <vector>

#include "mlp/mlp_model.hpp"
#include "tessera/strategy_kit/init.hpp"
#include "tessera/strategy_kit/layer_runner.hpp"
#include "tessera/strategy_kit/tensor_parallel.hpp"

namespace tessera::testing {

// Four Linear layers with ReLU between: model layers fc0 act0 fc1 act1 fc2 act2 fc3. 11 hidden
// features do not divide by 2, so the tensor-parallel split is uneven (6 + 5).
inline mlp::MlpConfig four_linear_config() {
  mlp::MlpConfig config;
  config.sizes = {6, 9, 11, 7, 5};
  return config;
}

// The whole model's parameters, one buffer per ParamSpec in model order.
inline std::vector<std::vector<float>> whole_parameters(const Model& model, std::uint64_t seed) {
  std::vector<std::vector<float>> params;
  for (std::size_t l = 0; l < model.layer_count(); ++l) {
    for (const ParamSpec& spec : model.layer(l).parameters()) {
      params.emplace_back(element_count(spec.shape));
      initialize_parameter(spec, seed, params.size() - 1, params.back());
      // Biases start at zero; make them count in the comparisons.
      if (spec.init == ParamInit::zeros) {
        for (std::size_t i = 0; i < params.back().size(); ++i) {
          params.back()[i] = 0.01F * static_cast<float>(i % 7) - 0.03F;
        }
      }
    }
  }
  return params;
}

// What one rank holds: its (possibly sliced) layers' parameters cut from the whole ones, and
// zeroed gradients, with the hooks that hand them to the layer runner.
struct RankLayers {
  std::vector<const Layer*> layers;
  std::vector<std::unique_ptr<Layer>> owned;  // sliced layers
  std::vector<std::vector<float>> params;     // [parameter index in model order]
  std::vector<std::vector<float>> grads;
  std::vector<ParamSpec> specs;
  std::vector<std::vector<std::size_t>> layer_params;  // [layer] -> parameter indices

  RankLayers(const Model& model, const std::vector<std::vector<float>>& whole,
             const std::vector<TensorParallelRole>& roles = {}, TensorSlice slice = {}) {
    layers = model_layers(model);
    for (std::size_t l = 0; l < layers.size(); ++l) {
      if (l < roles.size() && roles[l] != TensorParallelRole::replicate) {
        owned.push_back(layers[l]->sliced(roles[l], slice));
        layers[l] = owned.back().get();
      }
      layer_params.emplace_back();
      for (const ParamSpec& spec : layers[l]->parameters()) {
        const std::size_t index = specs.size();
        layer_params[l].push_back(index);
        specs.push_back(spec);
        params.emplace_back(element_count(spec.shape));
        grads.emplace_back(element_count(spec.shape), 0.0F);
        copy_slice_from_whole(spec, whole.at(index), params.back());
      }
    }
  }

  LayerHooks hooks() {
    LayerHooks hooks;
    hooks.before_layer = [this](std::size_t l, LayerPass) { return views(params, l); };
    hooks.gradients = [this](std::size_t l) { return views(grads, l); };
    return hooks;
  }

 private:
  std::vector<BufferView> views(std::vector<std::vector<float>>& buffers, std::size_t l) {
    std::vector<BufferView> out;
    for (const std::size_t index : layer_params[l]) {
      out.push_back(view_of(std::span<float>(buffers[index])));
    }
    return out;
  }
};

inline std::vector<float> values_of(const Tensor& tensor) {
  const auto v = tensor.as<float>();
  return {v.begin(), v.end()};
}

}  // namespace tessera::testing
