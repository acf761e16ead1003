#pragma once
// Stochastic gradient descent with PyTorch's momentum, dampening, Nesterov and L2 weight decay.

#include "tessera/plugin/optimizer.hpp"
#include "tessera/plugin/options.hpp"

namespace tessera::sgd {

struct SgdConfig {
  float momentum = 0.0F;
  float dampening = 0.0F;
  float weight_decay = 0.0F;
  bool nesterov = false;
};

// Per element, with lr from StepInfo (torch.optim.SGD):
//   g = grad + weight_decay * p
//   b = g on step 1, else momentum * b + (1 - dampening) * g      (when momentum != 0)
//   g = nesterov ? g + momentum * b : b                            (when momentum != 0)
//   p = p - lr * g
// State: one slot (b) when momentum != 0, none otherwise.
class SgdOptimizer final : public Optimizer {
 public:
  // Throws InvalidArgument for negative values, or nesterov without momentum or with dampening.
  explicit SgdOptimizer(const SgdConfig& config);
  explicit SgdOptimizer(const Options& options);

  [[nodiscard]] std::size_t state_per_param() const noexcept override {
    return config_.momentum != 0.0F ? 1 : 0;
  }
  // The host, and a CUDA device this process sees where tessera is built with CUDA.
  [[nodiscard]] bool runs_on(Device device) const noexcept override;
  using Optimizer::step;
  void step(BufferView params, BufferView grads, BufferView state,
            const StepInfo& info) const override;

 private:
  SgdConfig config_;
};

}  // namespace tessera::sgd
