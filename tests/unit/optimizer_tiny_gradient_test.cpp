// Each optimizer at gradients so small that eps decides the update (1e-7 is the size of eps'
// neighbourhood for Adam's sqrt(v_hat), 1e-12 is far below it). The references are PyTorch's
// update rules written out in double in this file; the tolerance is relative to how far each
// parameter moved, so a term that changes the update by 0.1 % fails. The parameters start near
// zero so that float rounding of p itself stays far below that.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <functional>
#include <vector>

#include "adam/adam.hpp"
#include "rmsprop/rmsprop.hpp"
#include "sgd/sgd.hpp"

namespace tessera {
namespace {

constexpr int kSteps = 4;
constexpr std::size_t kElements = 9;

// One element's update in double; `s` holds the optimizer's slots for that element.
using Reference =
    std::function<void(double& p, double g, std::vector<double>& s, int t, double lr)>;

// Gradients of both signs and a few magnitudes around `scale`, different every step.
double gradient(std::size_t i, int t, double scale) {
  const double sign = (i + static_cast<std::size_t>(t)) % 3 == 0 ? -1.0 : 1.0;
  return sign * scale *
         (0.5 + 0.25 * static_cast<double>((i * 7 + static_cast<std::size_t>(t)) % 5));
}

void expect_matches_at_gradient_scale(const Optimizer& optimizer, std::size_t slots,
                                      double grad_scale, double param_scale, double lr,
                                      const Reference& ref) {
  std::vector<float> params(kElements);
  for (std::size_t i = 0; i < kElements; ++i)
    params[i] = static_cast<float>(param_scale * (static_cast<double>(i) - 4.0) / 4.0);
  std::vector<double> ref_params(params.begin(), params.end());
  const std::vector<double> start = ref_params;
  std::vector<float> state(slots * kElements, 0.0F);
  std::vector<std::vector<double>> ref_state(kElements, std::vector<double>(slots, 0.0));
  std::vector<double> path(kElements, 0.0);  // sum of |each step's move|, the scale of errors
  for (int t = 1; t <= kSteps; ++t) {
    std::vector<float> g(kElements);
    for (std::size_t i = 0; i < kElements; ++i)
      g[i] = static_cast<float>(gradient(i, t, grad_scale));
    optimizer.step(params, g, state, StepInfo{t, static_cast<float>(lr)});
    for (std::size_t i = 0; i < kElements; ++i) {
      const double before = ref_params[i];
      ref(ref_params[i], static_cast<double>(g[i]), ref_state[i], t,
          static_cast<double>(static_cast<float>(lr)));
      path[i] += std::abs(ref_params[i] - before);
    }
  }
  for (std::size_t i = 0; i < kElements; ++i) {
    const double moved_ref = ref_params[i] - start[i];
    const double moved = static_cast<double>(params[i]) - start[i];
    ASSERT_GT(path[i], 0.0) << "element " << i << ": the reference did not move";
    // 1e-4 of the distance travelled, plus a few float ulps of the parameter per step.
    const double ulps = 8.0 * kSteps * std::abs(ref_params[i]) * 6e-8;
    EXPECT_NEAR(moved, moved_ref, 1e-4 * path[i] + ulps)
        << "element " << i << " at gradient scale " << grad_scale;
  }
}

Reference sgd_reference(double momentum, double dampening, double wd, bool nesterov) {
  return [=](double& p, double g, std::vector<double>& s, int t, double lr) {
    const double d = g + wd * p;
    if (momentum == 0.0) {
      p -= lr * d;
      return;
    }
    s[0] = t == 1 ? d : momentum * s[0] + (1.0 - dampening) * d;
    p -= lr * (nesterov ? d + momentum * s[0] : s[0]);
  };
}

Reference adam_reference(double b1, double b2, double eps, double wd, bool decoupled) {
  return [=](double& p, double g, std::vector<double>& s, int t, double lr) {
    if (decoupled) {
      p *= 1.0 - lr * wd;
    } else {
      g += wd * p;
    }
    s[0] = b1 * s[0] + (1.0 - b1) * g;
    s[1] = b2 * s[1] + (1.0 - b2) * g * g;
    const double bc1 = 1.0 - std::pow(b1, t);
    const double bc2 = 1.0 - std::pow(b2, t);
    // torch.optim.adam (_single_tensor_adam): denom = sqrt(v) / sqrt(bc2) + eps.
    p -= (lr / bc1) * s[0] / (std::sqrt(s[1]) / std::sqrt(bc2) + eps);
  };
}

Reference rmsprop_reference(double alpha, double eps, double wd, double momentum, bool centered) {
  return [=](double& p, double g, std::vector<double>& s, int, double lr) {
    g += wd * p;
    s[0] = alpha * s[0] + (1.0 - alpha) * g * g;
    const std::size_t avg_slot = momentum > 0.0 ? 2 : 1;
    double denom = 0.0;
    if (centered) {
      s[avg_slot] = alpha * s[avg_slot] + (1.0 - alpha) * g;
      denom = std::sqrt(s[0] - s[avg_slot] * s[avg_slot]) + eps;
    } else {
      denom = std::sqrt(s[0]) + eps;
    }
    if (momentum > 0.0) {
      s[1] = momentum * s[1] + g / denom;
      p -= lr * s[1];
    } else {
      p -= lr * g / denom;
    }
  };
}

class TinyGradients : public ::testing::TestWithParam<double> {};

TEST_P(TinyGradients, SgdPlainMomentumNesterovAndWeightDecayMatchPyTorch) {
  const double scale = GetParam();
  const sgd::SgdOptimizer plain(sgd::SgdConfig{0.0F, 0.0F, 0.0F, false});
  expect_matches_at_gradient_scale(plain, 0, scale, 1e-3, 0.1, sgd_reference(0, 0, 0, false));
  const sgd::SgdOptimizer decay(sgd::SgdConfig{0.0F, 0.0F, 1e-4F, false});
  expect_matches_at_gradient_scale(decay, 0, scale, std::min(1e-3, scale * 1e3), 0.1,
                                   sgd_reference(0, 0, 1e-4, false));
  const sgd::SgdOptimizer momentum(sgd::SgdConfig{0.9F, 0.25F, 0.0F, false});
  expect_matches_at_gradient_scale(momentum, 1, scale, 1e-3, 0.1,
                                   sgd_reference(0.9, 0.25, 0, false));
  const sgd::SgdOptimizer nesterov(sgd::SgdConfig{0.9F, 0.0F, 1e-4F, true});
  expect_matches_at_gradient_scale(nesterov, 1, scale, std::min(1e-3, scale * 1e3), 0.1,
                                   sgd_reference(0.9, 0, 1e-4, true));
}

TEST_P(TinyGradients, AdamMatchesPyTorch) {
  const double scale = GetParam();
  const adam::AdamOptimizer opt(adam::AdamConfig{0.9F, 0.999F, 1e-8F, 0.0F, false});
  expect_matches_at_gradient_scale(opt, 2, scale, 1e-3, 1e-3,
                                   adam_reference(0.9, 0.999, 1e-8F, 0, false));
  const adam::AdamOptimizer l2(adam::AdamConfig{0.9F, 0.999F, 1e-8F, 1e-3F, false});
  expect_matches_at_gradient_scale(l2, 2, scale, std::min(1e-3, scale * 1e3), 1e-3,
                                   adam_reference(0.9, 0.999, 1e-8F, 1e-3F, false));
}

TEST_P(TinyGradients, AdamWMatchesPyTorch) {
  const double scale = GetParam();
  const adam::AdamOptimizer opt(adam::AdamConfig{0.9F, 0.999F, 1e-8F, 0.01F, true});
  expect_matches_at_gradient_scale(opt, 2, scale, 1e-3, 1e-3,
                                   adam_reference(0.9, 0.999, 1e-8F, 0.01F, true));
}

TEST_P(TinyGradients, RmspropPlainAndCenteredWithMomentumMatchPyTorch) {
  const double scale = GetParam();
  const rmsprop::RmspropOptimizer plain(rmsprop::RmspropConfig{0.99F, 1e-8F, 0.0F, 0.0F, false});
  expect_matches_at_gradient_scale(plain, 1, scale, 1e-3, 1e-3,
                                   rmsprop_reference(0.99F, 1e-8F, 0, 0, false));
  const rmsprop::RmspropOptimizer centered(rmsprop::RmspropConfig{0.99F, 1e-8F, 1e-3F, 0.5F, true});
  expect_matches_at_gradient_scale(centered, 3, scale, std::min(1e-3, scale * 1e3), 1e-3,
                                   rmsprop_reference(0.99F, 1e-8F, 1e-3F, 0.5, true));
}

// 1 sets the scale where eps hardly matters, as a control for the two where it decides.
INSTANTIATE_TEST_SUITE_P(Optimizers, TinyGradients, ::testing::Values(1.0, 1e-7, 1e-12));

// The first three updates of one parameter at 1.0 with a constant gradient, as torch 2.x's
// torch.optim printed them (float32, default betas and eps). Independent of the formulas above.
struct Recorded {
  double gradient;
  float after[3];
};

void expect_recorded(const Optimizer& opt, std::size_t slots, float lr, const Recorded& r) {
  std::vector<float> p{1.0F};
  std::vector<float> s(slots, 0.0F);
  const std::vector<float> g{static_cast<float>(r.gradient)};
  for (int t = 1; t <= 3; ++t) {
    opt.step(p, g, s, StepInfo{t, lr});
    EXPECT_NEAR(p[0], r.after[t - 1], 2e-7) << "gradient " << r.gradient << " step " << t;
  }
}

TEST(TinyGradientsRecorded, AdamAdamWAndRmspropMatchTorchOptimOutput) {
  const adam::AdamOptimizer adam(adam::AdamConfig{0.9F, 0.999F, 1e-8F, 0.0F, false});
  expect_recorded(adam, 2, 0.1F,
                  {1e-7, {0.9090909361839294F, 0.8181818723678589F, 0.7272728085517883F}});
  expect_recorded(adam, 2, 0.1F,
                  {1e-12, {0.9999899864196777F, 0.9999799728393555F, 0.9999699592590332F}});
  const adam::AdamOptimizer adamw(adam::AdamConfig{0.9F, 0.999F, 1e-8F, 0.01F, true});
  expect_recorded(adamw, 2, 0.1F,
                  {1e-7, {0.9080909490585327F, 0.8162738084793091F, 0.7245484590530396F}});
  expect_recorded(adamw, 2, 0.1F,
                  {1e-12, {0.998989999294281F, 0.9979810118675232F, 0.9969730377197266F}});
  const rmsprop::RmspropOptimizer rms(rmsprop::RmspropConfig{0.99F, 1e-8F, 0.0F, 0.0F, false});
  expect_recorded(rms, 1, 0.01F,
                  {1e-7, {0.949999988079071F, 0.9085178375244141F, 0.8717989921569824F}});
  const rmsprop::RmspropOptimizer centered(rmsprop::RmspropConfig{0.99F, 1e-8F, 0.0F, 0.5F, true});
  expect_recorded(centered, 3, 0.01F,
                  {1e-7, {0.9498743414878845F, 0.8830851912498474F, 0.8126207590103149F}});
  expect_recorded(centered, 3, 0.01F,
                  {1e-12, {0.9999989867210388F, 0.9999974966049194F, 0.999995768070221F}});
}

}  // namespace
}  // namespace tessera
