#pragma once
// Element-wise activations: ReLU and GELU (tanh approximation, as PyTorch's approximate="tanh"),
// on the host or, for an input on a CUDA device, there (device_compute.hpp).

#include <memory>

#include "layers/compute_context.hpp"
#include "tessera/plugin/layer.hpp"

namespace tessera::layers {

enum class ActivationKind : std::uint8_t { relu, gelu };

// "relu" or "gelu"; throws ConfigError naming the valid ones.
[[nodiscard]] ActivationKind parse_activation(std::string_view name);

// No parameters. ReLU saves an alias of its output (the mask), GELU an alias of its input.
class Activation final : public Layer {
 public:
  Activation(std::string name, ActivationKind kind, std::shared_ptr<const ComputeContext> compute);

  [[nodiscard]] std::string name() const override { return name_; }
  [[nodiscard]] std::vector<ParamSpec> parameters() const override { return {}; }
  [[nodiscard]] Shape output_shape(const Shape& input) const override { return input; }

  Tensor forward(const Tensor& input, std::span<const BufferView> params,
                 LayerContext& ctx) const override;
  Tensor backward(const Tensor& grad_output, std::span<const BufferView> params,
                  std::span<const BufferView> grads, LayerContext& ctx) const override;

 private:
  std::string name_;
  ActivationKind kind_;
  std::shared_ptr<const ComputeContext> compute_;
};

}  // namespace tessera::layers
