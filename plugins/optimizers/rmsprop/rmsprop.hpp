#pragma once
// RMSprop with PyTorch's update formulas (optionally centered, with momentum).

#include "tessera/plugin/optimizer.hpp"
#include "tessera/plugin/options.hpp"

namespace tessera::rmsprop {

struct RmspropConfig {
  float alpha = 0.99F;
  float eps = 1e-8F;
  float weight_decay = 0.0F;
  float momentum = 0.0F;
  bool centered = false;
};

// Per element, with lr from StepInfo (torch.optim.RMSprop):
//   g = grad + weight_decay * p
//   s = alpha * s + (1 - alpha) * g^2
//   a = alpha * a + (1 - alpha) * g;  d = sqrt(s - a^2) + eps      (centered)
//                                     d = sqrt(s) + eps            (otherwise)
//   b = momentum * b + g / d;  p = p - lr * b                      (momentum > 0)
//   p = p - lr * g / d                                             (otherwise)
// State slots, in this order: s, then b when momentum > 0, then a when centered.
class RmspropOptimizer final : public Optimizer {
 public:
  // Throws InvalidArgument for alpha outside [0, 1], eps <= 0, negative momentum or decay.
  explicit RmspropOptimizer(const RmspropConfig& config);
  explicit RmspropOptimizer(const Options& options);

  [[nodiscard]] std::size_t state_per_param() const noexcept override {
    return 1 + (config_.momentum > 0.0F ? 1 : 0) + (config_.centered ? 1 : 0);
  }
  // The host, and a CUDA device this process sees where tessera is built with CUDA.
  [[nodiscard]] bool runs_on(Device device) const noexcept override;
  using Optimizer::step;
  void step(BufferView params, BufferView grads, BufferView state,
            const StepInfo& info) const override;

 private:
  RmspropConfig config_;
};

}  // namespace tessera::rmsprop
