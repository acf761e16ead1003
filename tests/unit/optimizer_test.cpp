// Each optimizer against a double-precision transcription of PyTorch's update rule, and the
// element-wise contract: any partition of the spans gives the same bits as one whole call.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <functional>
#include <memory>

#include "adam/adam.hpp"
#include "rmsprop/rmsprop.hpp"
#include "sgd/sgd.hpp"
#include "tessera/base/error.hpp"
#include "tessera/base/random.hpp"

namespace tessera {
namespace {

constexpr std::size_t kElements = 37;
constexpr int kSteps = 5;
constexpr float kLr = 0.1F;

std::vector<float> values(std::uint64_t seed, float scale) {
  std::vector<float> v(kElements);
  for (std::size_t i = 0; i < v.size(); ++i)
    v[i] = (2.0F * counter_uniform(seed, 3, i) - 1.0F) * scale;
  return v;
}

// The gradient of step t (1-based): fresh values each step so momentum terms matter.
std::vector<float> gradient(int t) {
  return values(100 + static_cast<std::uint64_t>(t), 1.0F);
}

// Reference: one element's update in double, state in `s` (as many slots as the optimizer).
using Reference =
    std::function<void(double& p, double g, std::vector<double>& s, int t, double lr)>;

void expect_matches_reference(const Optimizer& optimizer, std::size_t slots, const Reference& ref) {
  ASSERT_EQ(optimizer.state_per_param(), slots);
  std::vector<float> params = values(1, 2.0F);
  std::vector<float> state(slots * kElements, 0.0F);
  std::vector<double> ref_params(params.begin(), params.end());
  std::vector<std::vector<double>> ref_state(kElements, std::vector<double>(slots, 0.0));
  for (int t = 1; t <= kSteps; ++t) {
    const std::vector<float> g = gradient(t);
    optimizer.step(params, g, state, StepInfo{t, kLr});
    for (std::size_t i = 0; i < kElements; ++i) ref(ref_params[i], g[i], ref_state[i], t, kLr);
  }
  for (std::size_t i = 0; i < kElements; ++i) {
    EXPECT_NEAR(params[i], ref_params[i], 2e-5 * std::max(1.0, std::abs(ref_params[i])))
        << "element " << i;
  }
}

void expect_partition_invariant(const Optimizer& optimizer) {
  const std::size_t slots = optimizer.state_per_param();
  auto run = [&](const std::vector<std::size_t>& cuts) {
    std::vector<float> params = values(1, 2.0F);
    std::vector<float> state(slots * kElements, 0.0F);
    for (int t = 1; t <= kSteps; ++t) {
      const std::vector<float> g = gradient(t);
      for (std::size_t c = 0; c + 1 < cuts.size(); ++c) {
        const std::size_t b = cuts[c];
        const std::size_t n = cuts[c + 1] - b;
        // A shard's state is its own slot-major block, as a ZeRO rank holds it.
        std::vector<float> shard_state(slots * n);
        for (std::size_t k = 0; k < slots; ++k) {
          std::copy_n(state.begin() + static_cast<std::ptrdiff_t>(k * kElements + b), n,
                      shard_state.begin() + static_cast<std::ptrdiff_t>(k * n));
        }
        optimizer.step(std::span(params).subspan(b, n), std::span(g).subspan(b, n), shard_state,
                       StepInfo{t, kLr});
        for (std::size_t k = 0; k < slots; ++k) {
          std::copy_n(shard_state.begin() + static_cast<std::ptrdiff_t>(k * n), n,
                      state.begin() + static_cast<std::ptrdiff_t>(k * kElements + b));
        }
      }
    }
    return params;
  };
  const std::vector<float> whole = run({0, kElements});
  for (const auto& cuts :
       std::vector<std::vector<std::size_t>>{{0, 1, kElements},
                                             {0, 13, 14, 30, kElements},
                                             {0, 3, 6, 9, 12, 15, 18, 21, 24, kElements}}) {
    const std::vector<float> parts = run(cuts);
    EXPECT_EQ(std::memcmp(whole.data(), parts.data(), kElements * sizeof(float)), 0);
  }
}

TEST(Sgd, PlainUpdateMatchesPyTorch) {
  const sgd::SgdOptimizer opt(sgd::SgdConfig{0.0F, 0.0F, 0.01F, false});
  expect_matches_reference(opt, 0, [](double& p, double g, std::vector<double>&, int, double lr) {
    p -= lr * (g + 0.01 * p);
  });
}

TEST(Sgd, MomentumWithDampeningMatchesPyTorch) {
  const sgd::SgdOptimizer opt(sgd::SgdConfig{0.9F, 0.25F, 0.0F, false});
  expect_matches_reference(opt, 1,
                           [](double& p, double g, std::vector<double>& s, int t, double lr) {
                             s[0] = t == 1 ? g : 0.9 * s[0] + 0.75 * g;
                             p -= lr * s[0];
                           });
}

TEST(Sgd, NesterovWithWeightDecayMatchesPyTorch) {
  const sgd::SgdOptimizer opt(sgd::SgdConfig{0.9F, 0.0F, 0.05F, true});
  expect_matches_reference(opt, 1,
                           [](double& p, double g, std::vector<double>& s, int t, double lr) {
                             const double d = g + 0.05 * p;
                             s[0] = t == 1 ? d : 0.9 * s[0] + d;
                             p -= lr * (d + 0.9 * s[0]);
                           });
}

TEST(Sgd, RefusesNesterovWithoutMomentum) {
  // Each value is in its range, the pair is not: the user's mistake, so a ConfigError.
  EXPECT_THROW(sgd::SgdOptimizer(sgd::SgdConfig{0.0F, 0.0F, 0.0F, true}), ConfigError);
}

Reference adam_reference(double wd, bool decoupled) {
  return [=](double& p, double g, std::vector<double>& s, int t, double lr) {
    const double b1 = 0.9;
    const double b2 = 0.999;
    if (decoupled) {
      p *= 1.0 - lr * wd;
    } else {
      g += wd * p;
    }
    s[0] = b1 * s[0] + (1 - b1) * g;
    s[1] = b2 * s[1] + (1 - b2) * g * g;
    const double m_hat = s[0] / (1 - std::pow(b1, t));
    const double v_hat = s[1] / (1 - std::pow(b2, t));
    p -= lr * m_hat / (std::sqrt(v_hat) + 1e-8);
  };
}

TEST(Adam, MatchesPyTorch) {
  const adam::AdamOptimizer opt(adam::AdamConfig{0.9F, 0.999F, 1e-8F, 0.0F, false});
  expect_matches_reference(opt, 2, adam_reference(0.0, false));
}

TEST(Adam, L2WeightDecayMatchesPyTorch) {
  const adam::AdamOptimizer opt(adam::AdamConfig{0.9F, 0.999F, 1e-8F, 0.1F, false});
  expect_matches_reference(opt, 2, adam_reference(0.1, false));
}

TEST(Adam, FirstStepMovesEachParameterByTheLearningRate) {
  const adam::AdamOptimizer opt(adam::AdamConfig{});
  std::vector<float> p{1.0F, 1.0F};
  const std::vector<float> g{0.5F, -3.0F};
  std::vector<float> s(4, 0.0F);
  opt.step(p, g, s, StepInfo{1, 0.1F});
  EXPECT_NEAR(p[0], 0.9F, 1e-6);
  EXPECT_NEAR(p[1], 1.1F, 1e-6);
}

TEST(AdamW, DecoupledWeightDecayMatchesPyTorch) {
  const adam::AdamOptimizer opt(adam::AdamConfig{0.9F, 0.999F, 1e-8F, 0.1F, true});
  expect_matches_reference(opt, 2, adam_reference(0.1, true));
}

// AdamW's update as adam.cpp computes it, element by element in float (the step's scalars in
// double, rounded once to float): the vectorised loop, in whichever clone this CPU runs (the
// AVX2 one on a CPU with AVX2), must give exactly these bits. 37 elements: whole vectors of 8
// and 4, and a remainder.
TEST(AdamW, VectorisedStepGivesTheBitsOfTheScalarFloatFormula) {
  constexpr float kBeta1 = 0.9F;
  constexpr float kBeta2 = 0.999F;
  constexpr float kEps = 1e-8F;
  constexpr float kDecay = 0.1F;
  const adam::AdamOptimizer opt(adam::AdamConfig{kBeta1, kBeta2, kEps, kDecay, true});
  std::vector<float> params = values(1, 2.0F);
  std::vector<float> state(2 * kElements, 0.0F);
  std::vector<float> p = params;
  std::vector<float> m(kElements, 0.0F);
  std::vector<float> v(kElements, 0.0F);
  for (int t = 1; t <= kSteps; ++t) {
    const std::vector<float> g = gradient(t);
    opt.step(params, g, state, StepInfo{t, kLr});
    const double lr = kLr;
    const auto keep = static_cast<float>(1.0 - lr * static_cast<double>(kDecay));
    const auto one_minus_b1 = static_cast<float>(1.0 - static_cast<double>(kBeta1));
    const auto one_minus_b2 = static_cast<float>(1.0 - static_cast<double>(kBeta2));
    const auto step_size = static_cast<float>(lr / (1.0 - std::pow(double{kBeta1}, t)));
    const auto bc2_sqrt = static_cast<float>(std::sqrt(1.0 - std::pow(double{kBeta2}, t)));
    for (std::size_t i = 0; i < kElements; ++i) {
      const float pi = p[i] * keep;
      const float gi = g[i] + 0.0F * pi;  // AdamW's l2 term, 0
      m[i] = kBeta1 * m[i] + one_minus_b1 * gi;
      v[i] = kBeta2 * v[i] + one_minus_b2 * gi * gi;
      p[i] = pi - step_size * (m[i] / (std::sqrt(v[i]) / bc2_sqrt + kEps));
    }
  }
  EXPECT_EQ(std::memcmp(params.data(), p.data(), kElements * sizeof(float)), 0);
  EXPECT_EQ(std::memcmp(state.data(), m.data(), kElements * sizeof(float)), 0);
  EXPECT_EQ(std::memcmp(state.data() + kElements, v.data(), kElements * sizeof(float)), 0);
}

Reference rmsprop_reference(double momentum, bool centered, double wd) {
  return [=](double& p, double g, std::vector<double>& s, int, double lr) {
    const double alpha = 0.99;
    g += wd * p;
    s[0] = alpha * s[0] + (1 - alpha) * g * g;
    double avg = 0.0;
    const std::size_t a = momentum > 0 ? 2 : 1;
    if (centered) {
      s[a] = alpha * s[a] + (1 - alpha) * g;
      avg = std::sqrt(s[0] - s[a] * s[a]) + 1e-8;
    } else {
      avg = std::sqrt(s[0]) + 1e-8;
    }
    if (momentum > 0) {
      s[1] = momentum * s[1] + g / avg;
      p -= lr * s[1];
    } else {
      p -= lr * g / avg;
    }
  };
}

TEST(Rmsprop, PlainMatchesPyTorch) {
  const rmsprop::RmspropOptimizer opt(rmsprop::RmspropConfig{0.99F, 1e-8F, 0.0F, 0.0F, false});
  expect_matches_reference(opt, 1, rmsprop_reference(0.0, false, 0.0));
}

TEST(Rmsprop, CenteredWithMomentumAndDecayMatchesPyTorch) {
  const rmsprop::RmspropOptimizer opt(rmsprop::RmspropConfig{0.99F, 1e-8F, 0.01F, 0.5F, true});
  expect_matches_reference(opt, 3, rmsprop_reference(0.5, true, 0.01));
}

// Buffers on a device an optimizer does not run on are refused by name before any memory is read,
// and runs_on says so up front, so a strategy can choose before it places state on a device. The
// host always; a CUDA device only where tessera is built with CUDA and the device is visible
// (cuda_optimizers_test.cpp), so this test takes an ordinal no machine has.
TEST(Optimizers, RefuseBuffersOnADeviceTheyDoNotRunOn) {
  const Device nowhere = Device::cuda(1 << 16);
  const adam::AdamOptimizer opt(adam::AdamConfig{});
  EXPECT_TRUE(opt.runs_on(Device::cpu()));
  EXPECT_FALSE(opt.runs_on(nowhere));
  std::vector<float> p(4, 1.0F), g(4, 0.5F), s(8, 0.0F);
  const BufferView on_device{p.data(), p.size(), DType::f32, nowhere};
  try {
    opt.step(on_device, view_of(std::span<float>(g)), view_of(std::span<float>(s)),
             StepInfo{1, 0.1F});
    FAIL() << "adam stepped on cuda:65536 memory";
  } catch (const InvalidArgument& e) {
    EXPECT_NE(std::string(e.what()).find("cuda:65536"), std::string::npos) << e.what();
  }
  EXPECT_EQ(p, std::vector<float>(4, 1.0F));
  const BufferView doubles{p.data(), 2, DType::f64, Device::cpu()};
  EXPECT_THROW(opt.step(doubles, view_of(std::span<float>(g)), view_of(std::span<float>(s)),
                        StepInfo{1, 0.1F}),
               InvalidArgument);
}

TEST(Optimizers, AnyPartitionGivesTheBitsOfOneWholeCall) {
  const std::vector<std::shared_ptr<const Optimizer>> all{
      std::make_shared<sgd::SgdOptimizer>(sgd::SgdConfig{}),
      std::make_shared<sgd::SgdOptimizer>(sgd::SgdConfig{0.9F, 0.1F, 0.01F, false}),
      std::make_shared<sgd::SgdOptimizer>(sgd::SgdConfig{0.9F, 0.0F, 0.01F, true}),
      std::make_shared<adam::AdamOptimizer>(adam::AdamConfig{0.9F, 0.999F, 1e-8F, 0.01F, false}),
      std::make_shared<adam::AdamOptimizer>(adam::AdamConfig{0.9F, 0.999F, 1e-8F, 0.01F, true}),
      std::make_shared<rmsprop::RmspropOptimizer>(rmsprop::RmspropConfig{}),
      std::make_shared<rmsprop::RmspropOptimizer>(
          rmsprop::RmspropConfig{0.9F, 1e-8F, 0.01F, 0.9F, true}),
  };
  for (const auto& optimizer : all) expect_partition_invariant(*optimizer);
}

TEST(Optimizers, RefuseStateOfTheWrongSize) {
  const adam::AdamOptimizer opt(adam::AdamConfig{});
  std::vector<float> p(4);
  const std::vector<float> g(4);
  std::vector<float> s(4);
  EXPECT_THROW(opt.step(p, g, s, StepInfo{1, 0.1F}), InvalidArgument);
}

}  // namespace
}  // namespace tessera
