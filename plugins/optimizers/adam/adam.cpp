#include "adam/adam.hpp"

#include <cmath>
#include <cstddef>

#include "step_checks.hpp"

namespace tessera::adam {
namespace {

// Built twice, for baseline x86-64 (SSE2, 4 floats a vector) and for AVX2 (8 floats); the
// loader picks the AVX2 clone where the CPU has it (GCC function multiversioning), so the binary
// still runs on any x86-64. No FMA and no reassociation (-ffp-contract=off, no -ffast-math:
// the CMakeLists): both clones give the bits of the scalar formula.
#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
__attribute__((target_clones("avx2", "default")))
#endif
void update_elements(float* p, const float* g, float* m, float* v, std::size_t begin,
                     std::size_t end, const optimizers::AdamScalars& k) {
  // Multiplying by 1 is exact, so one branch-free loop serves both rules (and vectorises).
  // The scalars as locals: the stores through p, m and v cannot alias them.
  const float keep = k.decoupled ? k.decay : 1.0F;
  const float l2 = k.l2;
  const float beta1 = k.beta1;
  const float beta2 = k.beta2;
  const float one_minus_b1 = k.one_minus_b1;
  const float one_minus_b2 = k.one_minus_b2;
  const float step_size = k.step_size;
  const float bc2_sqrt = k.bc2_sqrt;
  const float eps = k.eps;
  for (std::size_t i = begin; i < end; ++i) {
    const float pi = p[i] * keep;
    const float gi = g[i] + l2 * pi;
    const float mi = beta1 * m[i] + one_minus_b1 * gi;
    const float vi = beta2 * v[i] + one_minus_b2 * gi * gi;
    m[i] = mi;
    v[i] = vi;
    p[i] = pi - step_size * (mi / (std::sqrt(vi) / bc2_sqrt + eps));
  }
}

}  // namespace

AdamOptimizer::AdamOptimizer(const AdamConfig& config) : config_(config) {
  TESSERA_CHECK(config.beta1 >= 0.0F && config.beta1 < 1.0F, "adam: beta1 must be in [0, 1)");
  TESSERA_CHECK(config.beta2 >= 0.0F && config.beta2 < 1.0F, "adam: beta2 must be in [0, 1)");
  TESSERA_CHECK(config.eps > 0.0F, "adam: eps must be positive");
  TESSERA_CHECK(config.weight_decay >= 0.0F, "adam: weight_decay must not be negative");
}

bool AdamOptimizer::runs_on(Device device) const noexcept {
  return device == Device::cpu() || optimizers::updates_on(device);
}

void AdamOptimizer::step(BufferView param_view, BufferView grad_view, BufferView state_view,
                         const StepInfo& info) const {
  const char* name = config_.decoupled_weight_decay ? "adamw" : "adam";
  const Device device = optimizers::step_device(name, param_view, grad_view, state_view, 2, info);
  // Step scalars in double, rounded once to float, as PyTorch does with its Python scalars.
  const auto t = static_cast<double>(info.step);
  const double lr = info.learning_rate;
  const double b1 = config_.beta1;
  const double b2 = config_.beta2;
  const auto beta1 = config_.beta1;
  const auto beta2 = config_.beta2;
  const auto one_minus_b1 = static_cast<float>(1.0 - b1);
  const auto one_minus_b2 = static_cast<float>(1.0 - b2);
  const auto step_size = static_cast<float>(lr / (1.0 - std::pow(b1, t)));
  const auto bc2_sqrt = static_cast<float>(std::sqrt(1.0 - std::pow(b2, t)));
  const float eps = config_.eps;
  const bool decoupled = config_.decoupled_weight_decay;
  // An exempt segment multiplies by exactly 1 (AdamW) or adds 0 * p (Adam): weight_decay = 0's
  // bits, as PyTorch's parameter group with weight_decay 0 gives.
  const auto scalars_of = [&](const optimizers::DecaySegment& s) {
    const double wd = s.decays ? config_.weight_decay : 0.0F;
    const auto decay = static_cast<float>(decoupled ? 1.0 - lr * wd : 0.0);
    const float l2 = decoupled ? 0.0F : static_cast<float>(wd);
    return optimizers::AdamScalars{beta1,    beta2, one_minus_b1, one_minus_b2, step_size,
                                   bc2_sqrt, eps,   decay,        l2,           decoupled};
  };
  const auto segments = optimizers::decay_segments(name, param_view.count, info);
  if (device != Device::cpu()) {
    const auto whole = optimizers::device_step(name, device, param_view, grad_view, state_view);
    for (const auto& s : segments) {
      optimizers::adam_update(optimizers::segment_of(whole, s), scalars_of(s));
    }
    return;
  }
  const auto [params, grads, state] =
      optimizers::check_step_spans(name, param_view, grad_view, state_view, 2, info);
  const std::size_t n = params.size();
  float* p = params.data();
  const float* g = grads.data();
  float* m = state.data();
  float* v = state.data() + n;
  for (const auto& s : segments) update_elements(p, g, m, v, s.begin, s.end, scalars_of(s));
}

AdamConfig adam_config_from(const Options& options, bool decoupled_weight_decay) {
  AdamConfig config;
  config.beta1 = static_cast<float>(options.get_float("beta1"));
  config.beta2 = static_cast<float>(options.get_float("beta2"));
  config.eps = static_cast<float>(options.get_float("eps"));
  config.weight_decay = static_cast<float>(options.get_float("weight_decay"));
  config.decoupled_weight_decay = decoupled_weight_decay;
  return config;
}

}  // namespace tessera::adam
