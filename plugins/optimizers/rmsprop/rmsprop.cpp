#include "rmsprop/rmsprop.hpp"

#include <cmath>

#include "step_checks.hpp"

namespace tessera::rmsprop {

RmspropOptimizer::RmspropOptimizer(const RmspropConfig& config) : config_(config) {
  TESSERA_CHECK(config.alpha >= 0.0F && config.alpha <= 1.0F, "rmsprop: alpha must be in [0, 1]");
  TESSERA_CHECK(config.eps > 0.0F, "rmsprop: eps must be positive");
  TESSERA_CHECK(config.momentum >= 0.0F, "rmsprop: momentum must not be negative");
  TESSERA_CHECK(config.weight_decay >= 0.0F, "rmsprop: weight_decay must not be negative");
}

bool RmspropOptimizer::runs_on(Device device) const noexcept {
  return device == Device::cpu() || optimizers::updates_on(device);
}

void RmspropOptimizer::step(BufferView param_view, BufferView grad_view, BufferView state_view,
                            const StepInfo& info) const {
  const Device device = optimizers::step_device("rmsprop", param_view, grad_view, state_view,
                                                state_per_param(), info);
  const float lr = info.learning_rate;
  const float alpha = config_.alpha;
  const auto one_minus_alpha = static_cast<float>(1.0 - static_cast<double>(config_.alpha));
  const float eps = config_.eps;
  const float mu = config_.momentum;
  const bool use_momentum = mu > 0.0F;
  const bool centered = config_.centered;
  const auto segments = optimizers::decay_segments("rmsprop", param_view.count, info);
  const auto decay_of = [&](const optimizers::DecaySegment& s) {
    return s.decays ? config_.weight_decay : 0.0F;
  };
  if (device != Device::cpu()) {
    const auto whole =
        optimizers::device_step("rmsprop", device, param_view, grad_view, state_view);
    for (const auto& s : segments) {
      optimizers::rmsprop_update(
          optimizers::segment_of(whole, s),
          {lr, alpha, one_minus_alpha, eps, decay_of(s), mu, use_momentum, centered});
    }
    return;
  }
  const auto [params, grads, state] = optimizers::check_step_spans(
      "rmsprop", param_view, grad_view, state_view, state_per_param(), info);
  const std::size_t n = params.size();
  float* p = params.data();
  const float* g = grads.data();
  float* s = state.data();
  float* b = use_momentum ? state.data() + n : nullptr;
  float* a = centered ? state.data() + n * (use_momentum ? 2 : 1) : nullptr;
  for (const auto& segment : segments) {
    const float wd = decay_of(segment);
    for (std::size_t i = segment.begin; i < segment.end; ++i) {
      const float gi = g[i] + wd * p[i];
      const float si = alpha * s[i] + one_minus_alpha * gi * gi;
      s[i] = si;
      float d = 0.0F;
      if (centered) {
        const float ai = alpha * a[i] + one_minus_alpha * gi;
        a[i] = ai;
        d = std::sqrt(si - ai * ai) + eps;
      } else {
        d = std::sqrt(si) + eps;
      }
      if (use_momentum) {
        const float bi = mu * b[i] + gi / d;
        b[i] = bi;
        p[i] -= lr * bi;
      } else {
        p[i] -= lr * (gi / d);
      }
    }
  }
}

}  // namespace tessera::rmsprop
