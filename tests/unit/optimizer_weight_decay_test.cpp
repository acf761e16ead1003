// Per-parameter weight decay (StepInfo::no_weight_decay): an exempt element updates with the
// bits of the same optimizer without weight decay, every other element with the bits of the
// optimizer with it, and a call on any part of the buffers with its exemptions moved along gives
// the bits of one whole call (what a ZeRO shard that starts inside one parameter and ends inside
// another relies on).
#include <gtest/gtest.h>

#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "adam/adam.hpp"
#include "rmsprop/rmsprop.hpp"
#include "sgd/sgd.hpp"
#include "tessera/base/error.hpp"
#include "tessera/base/random.hpp"

namespace tessera {
namespace {

constexpr std::size_t kElements = 23;
constexpr int kSteps = 4;
constexpr float kLr = 0.05F;
// Elements 0-2, 7-12 and 20-22 decay; the rest is exempt (a bias, a norm, an embedding).
const std::vector<ElementRange> kExempt = {{3, 7}, {13, 20}};

bool exempt(std::size_t i) {
  for (const auto& r : kExempt) {
    if (i >= r.begin && i < r.end) return true;
  }
  return false;
}

std::vector<float> values(std::uint64_t seed) {
  std::vector<float> v(kElements);
  for (std::size_t i = 0; i < v.size(); ++i) v[i] = 2.0F * counter_uniform(seed, 5, i) - 1.0F;
  return v;
}

struct Buffers {
  std::vector<float> params;
  std::vector<float> state;
};

// kSteps steps over the whole buffers, with `exemptions`.
Buffers steps(const Optimizer& optimizer, std::span<const ElementRange> exemptions) {
  Buffers run{values(1), std::vector<float>(optimizer.state_per_param() * kElements, 0.0F)};
  for (int t = 1; t <= kSteps; ++t) {
    const auto g = values(10 + static_cast<std::uint64_t>(t));
    StepInfo info{t, kLr};
    info.no_weight_decay = exemptions;
    optimizer.step(run.params, g, run.state, info);
  }
  return run;
}

struct Pair {
  std::string name;
  std::shared_ptr<const Optimizer> with_decay;
  std::shared_ptr<const Optimizer> without_decay;
};

// Each optimizer with a weight decay large enough to move every element's bits, and without.
std::vector<Pair> pairs() {
  std::vector<Pair> out;
  for (const bool decoupled : {true, false}) {
    adam::AdamConfig c;
    c.decoupled_weight_decay = decoupled;
    c.weight_decay = 0.5F;
    auto with = std::make_shared<adam::AdamOptimizer>(c);
    c.weight_decay = 0.0F;
    out.push_back({decoupled ? "adamw" : "adam", with, std::make_shared<adam::AdamOptimizer>(c)});
  }
  sgd::SgdConfig s;
  s.momentum = 0.9F;
  s.weight_decay = 0.5F;
  auto sgd_with = std::make_shared<sgd::SgdOptimizer>(s);
  s.weight_decay = 0.0F;
  out.push_back({"sgd", sgd_with, std::make_shared<sgd::SgdOptimizer>(s)});
  rmsprop::RmspropConfig r;
  r.centered = true;
  r.momentum = 0.5F;
  r.weight_decay = 0.5F;
  auto rms_with = std::make_shared<rmsprop::RmspropOptimizer>(r);
  r.weight_decay = 0.0F;
  out.push_back({"rmsprop", rms_with, std::make_shared<rmsprop::RmspropOptimizer>(r)});
  return out;
}

TEST(PerParameterWeightDecay, ExemptElementsGetTheBitsOfNoDecayAndTheOthersOfDecay) {
  for (const auto& pair : pairs()) {
    const Buffers mixed = steps(*pair.with_decay, kExempt);
    const Buffers decayed = steps(*pair.with_decay, {});
    const Buffers undecayed = steps(*pair.without_decay, {});
    const std::size_t slots = pair.with_decay->state_per_param();
    for (std::size_t i = 0; i < kElements; ++i) {
      const Buffers& expected = exempt(i) ? undecayed : decayed;
      const Buffers& other = exempt(i) ? decayed : undecayed;
      EXPECT_EQ(mixed.params[i], expected.params[i]) << pair.name << " element " << i;
      // Else the expectation above could not tell the two rules apart.
      EXPECT_NE(mixed.params[i], other.params[i]) << pair.name << " element " << i;
      for (std::size_t k = 0; k < slots; ++k) {
        EXPECT_EQ(mixed.state[k * kElements + i], expected.state[k * kElements + i])
            << pair.name << " element " << i << " slot " << k;
      }
    }
  }
}

// Cuts that fall inside exempt ranges and inside decaying ones, each part stepped with the
// exemptions that fall inside it, moved to its own start (as DecayExemptions::within gives them).
TEST(PerParameterWeightDecay, PartsCutInsideRangesGiveTheBitsOfOneWholeCall) {
  const std::vector<std::size_t> cuts = {0, 5, 9, 16, kElements};
  for (const auto& pair : pairs()) {
    const Optimizer& optimizer = *pair.with_decay;
    const std::size_t slots = optimizer.state_per_param();
    const Buffers whole = steps(optimizer, kExempt);
    Buffers parts{values(1), std::vector<float>(slots * kElements, 0.0F)};
    for (int t = 1; t <= kSteps; ++t) {
      const auto g = values(10 + static_cast<std::uint64_t>(t));
      for (std::size_t c = 0; c + 1 < cuts.size(); ++c) {
        const std::size_t b = cuts[c];
        const std::size_t n = cuts[c + 1] - b;
        std::vector<ElementRange> inside;
        for (const auto& r : kExempt) {
          const std::size_t lo = std::max(r.begin, b);
          const std::size_t hi = std::min(r.end, b + n);
          if (lo < hi) inside.push_back({lo - b, hi - b});
        }
        std::vector<float> state(slots * n);
        for (std::size_t k = 0; k < slots; ++k) {
          std::copy_n(parts.state.begin() + static_cast<std::ptrdiff_t>(k * kElements + b), n,
                      state.begin() + static_cast<std::ptrdiff_t>(k * n));
        }
        StepInfo info{t, kLr};
        info.no_weight_decay = inside;
        optimizer.step(std::span(parts.params).subspan(b, n), std::span(g).subspan(b, n), state,
                       info);
        for (std::size_t k = 0; k < slots; ++k) {
          std::copy_n(state.begin() + static_cast<std::ptrdiff_t>(k * n), n,
                      parts.state.begin() + static_cast<std::ptrdiff_t>(k * kElements + b));
        }
      }
    }
    EXPECT_EQ(std::memcmp(whole.params.data(), parts.params.data(), kElements * sizeof(float)), 0)
        << pair.name;
  }
}

TEST(PerParameterWeightDecay, RefusesExemptionsOutOfOrderEmptyOrPastTheBuffers) {
  const adam::AdamOptimizer adamw(adam::AdamConfig{0.9F, 0.999F, 1e-8F, 0.1F, true});
  for (const auto& bad : std::vector<std::vector<ElementRange>>{
           {{5, 8}, {2, 4}}, {{2, 6}, {5, 9}}, {{4, 4}}, {{20, kElements + 1}}}) {
    auto params = values(1);
    const auto before = params;
    const auto g = values(2);
    std::vector<float> state(2 * kElements, 0.0F);
    StepInfo info{1, kLr};
    info.no_weight_decay = bad;
    try {
      adamw.step(params, g, state, info);
      ADD_FAILURE() << "accepted exemptions starting [" << bad[0].begin << ", " << bad[0].end
                    << ")";
    } catch (const InvalidArgument& e) {
      EXPECT_NE(std::string(e.what()).find("adamw: the weight-decay exemption"), std::string::npos)
          << e.what();
    }
    EXPECT_EQ(params, before) << "refused before touching memory";
  }
}

}  // namespace
}  // namespace tessera
