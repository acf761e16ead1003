#pragma once
// The reference multi-layer perceptron: Linear, activation, ..., Linear, softmax cross-entropy.

#include <memory>
#include <string_view>
#include <vector>

#include "layers/activation.hpp"
#include "layers/compute_context.hpp"
#include "tessera/plugin/model.hpp"
#include "tessera/plugin/options.hpp"

namespace tessera::mlp {

struct MlpConfig {
  std::vector<std::size_t> sizes{784, 256, 256, 10};  // input, hidden..., classes
  layers::ActivationKind activation = layers::ActivationKind::relu;
  int threads = 1;
};

// "784,256,10" -> {784, 256, 10}. Throws ConfigError unless there are at least two positive
// integers.
[[nodiscard]] std::vector<std::size_t> parse_layer_sizes(std::string_view text);

class MlpModel final : public Model {
 public:
  explicit MlpModel(const MlpConfig& config);
  // From the plugin's options (layers, activation, threads).
  explicit MlpModel(const Options& options);

  // f32 [first size] in, one class of the last size out.
  [[nodiscard]] SampleLayout layout() const override {
    return {DType::f32, {sizes_.front()}, {}, sizes_.back()};
  }
  [[nodiscard]] std::size_t layer_count() const noexcept override { return layers_.size(); }
  [[nodiscard]] const Layer& layer(std::size_t index) const override;
  [[nodiscard]] LossResult loss(const Tensor& logits, const Tensor& targets) const override;

 private:
  std::vector<std::size_t> sizes_;
  std::shared_ptr<const layers::ComputeContext> compute_;
  std::vector<std::unique_ptr<Layer>> layers_;
};

}  // namespace tessera::mlp
