#pragma once
// Adam (L2 weight decay folded into the gradient) and AdamW (decoupled weight decay), with
// PyTorch's update formulas.

#include "tessera/plugin/optimizer.hpp"
#include "tessera/plugin/options.hpp"

namespace tessera::adam {

struct AdamConfig {
  float beta1 = 0.9F;
  float beta2 = 0.999F;
  float eps = 1e-8F;
  float weight_decay = 0.0F;
  bool decoupled_weight_decay = false;  // true: AdamW
};

// Per element, with lr and t = step from StepInfo (torch.optim.Adam / AdamW):
//   AdamW: p = p * (1 - lr * weight_decay)       Adam: g = grad + weight_decay * p
//   m = beta1 * m + (1 - beta1) * g
//   v = beta2 * v + (1 - beta2) * g^2
//   p = p - lr / (1 - beta1^t) * m / (sqrt(v) / sqrt(1 - beta2^t) + eps)
// State: two slots, m then v.
class AdamOptimizer : public Optimizer {
 public:
  // Throws InvalidArgument for betas outside [0, 1), eps <= 0 or negative weight decay.
  explicit AdamOptimizer(const AdamConfig& config);

  [[nodiscard]] std::size_t state_per_param() const noexcept final { return 2; }
  // The host, and a CUDA device this process sees where tessera is built with CUDA.
  [[nodiscard]] bool runs_on(Device device) const noexcept final;
  using Optimizer::step;
  void step(BufferView params, BufferView grads, BufferView state,
            const StepInfo& info) const final;

 private:
  AdamConfig config_;
};

// Reads beta1, beta2, eps, weight_decay.
[[nodiscard]] AdamConfig adam_config_from(const Options& options, bool decoupled_weight_decay);

}  // namespace tessera::adam
