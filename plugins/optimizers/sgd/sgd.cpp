#include "sgd/sgd.hpp"

#include <string>

#include "step_checks.hpp"
#include "tessera/base/error.hpp"

namespace tessera::sgd {

SgdOptimizer::SgdOptimizer(const SgdConfig& config) : config_(config) {
  TESSERA_CHECK(config.momentum >= 0.0F, "sgd: momentum must not be negative");
  TESSERA_CHECK(config.weight_decay >= 0.0F, "sgd: weight_decay must not be negative");
  // Two options that are each in range but not together: the user's mistake, not ours.
  if (config.nesterov && !(config.momentum > 0.0F && config.dampening == 0.0F)) {
    throw ConfigError("nesterov = true needs momentum > 0 and dampening = 0 (momentum " +
                      std::to_string(config.momentum) + ", dampening " +
                      std::to_string(config.dampening) + ")");
  }
}

bool SgdOptimizer::runs_on(Device device) const noexcept {
  return device == Device::cpu() || optimizers::updates_on(device);
}

void SgdOptimizer::step(BufferView param_view, BufferView grad_view, BufferView state_view,
                        const StepInfo& info) const {
  const Device device =
      optimizers::step_device("sgd", param_view, grad_view, state_view, state_per_param(), info);
  const float lr = info.learning_rate;
  const float wd = config_.weight_decay;
  const float mu = config_.momentum;
  const auto keep = static_cast<float>(1.0 - static_cast<double>(config_.dampening));
  const bool first = info.step == 1;
  const bool nesterov = config_.nesterov;
  if (device != Device::cpu()) {
    optimizers::sgd_update(
        optimizers::device_step("sgd", device, param_view, grad_view, state_view),
        {lr, wd, mu, keep, first, nesterov});
    return;
  }
  const auto [params, grads, state] = optimizers::check_step_spans(
      "sgd", param_view, grad_view, state_view, state_per_param(), info);
  const std::size_t n = params.size();
  float* p = params.data();
  const float* g = grads.data();
  if (mu == 0.0F) {
    for (std::size_t i = 0; i < n; ++i) p[i] -= lr * (g[i] + wd * p[i]);
    return;
  }
  float* b = state.data();
  for (std::size_t i = 0; i < n; ++i) {
    const float d = g[i] + wd * p[i];
    const float buf = first ? d : mu * b[i] + keep * d;
    b[i] = buf;
    p[i] -= lr * (nesterov ? d + mu * buf : buf);
  }
}

}  // namespace tessera::sgd
