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
  const float mu = config_.momentum;
  const auto keep = static_cast<float>(1.0 - static_cast<double>(config_.dampening));
  const bool first = info.step == 1;
  const bool nesterov = config_.nesterov;
  const auto segments = optimizers::decay_segments("sgd", param_view.count, info);
  const auto decay_of = [&](const optimizers::DecaySegment& s) {
    return s.decays ? config_.weight_decay : 0.0F;
  };
  if (device != Device::cpu()) {
    const auto whole = optimizers::device_step("sgd", device, param_view, grad_view, state_view);
    for (const auto& s : segments) {
      optimizers::sgd_update(optimizers::segment_of(whole, s),
                             {lr, decay_of(s), mu, keep, first, nesterov});
    }
    return;
  }
  const auto [params, grads, state] = optimizers::check_step_spans(
      "sgd", param_view, grad_view, state_view, state_per_param(), info);
  float* p = params.data();
  const float* g = grads.data();
  float* b = state.data();
  for (const auto& s : segments) {
    const float wd = decay_of(s);
    if (mu == 0.0F) {
      for (std::size_t i = s.begin; i < s.end; ++i) p[i] -= lr * (g[i] + wd * p[i]);
      continue;
    }
    for (std::size_t i = s.begin; i < s.end; ++i) {
      const float d = g[i] + wd * p[i];
      const float buf = first ? d : mu * b[i] + keep * d;
      b[i] = buf;
      p[i] -= lr * (nesterov ? d + mu * buf : buf);
    }
  }
}

}  // namespace tessera::sgd
