// Per-parameter weight decay under every strategy. A probe model whose gradients are all zero
// leaves weight decay as the only thing that moves a parameter, so after one sgd step each
// element is exactly p - lr * (wd * p) where its parameter decays and exactly p where it does
// not. The parameters' sizes are not powers of two, so at 3 ranks zero1/2's pieces, zero3's
// owned ranges and hybrid's zero1 shards start inside one parameter and end inside another.
// DecayExemptions, which cuts the exempt ranges at those edges, is tested on its own first.
#include <gtest/gtest.h>

#include <memory>
#include <string>
#include <vector>

#include "ddp_strategy.hpp"
#include "ddp_test_support.hpp"
#include "hybrid_strategy.hpp"
#include "sgd/sgd.hpp"
#include "tessera/base/error.hpp"
#include "tessera/strategy_kit/init.hpp"
#include "tessera/strategy_kit/weight_decay.hpp"
#include "zero3_strategy.hpp"
#include "zero_strategy.hpp"

namespace tessera {
namespace {

using Ranges = std::vector<ElementRange>;

TEST(DecayExemptions, WithinCutsRangesAtTheWindowsEdgesAndCountsFromItsStart) {
  DecayExemptions e;
  e.add(3, 7);
  e.add(7, 9);  // continues [3, 7): one range
  e.add(20, 31);
  EXPECT_EQ(e.ranges(), (Ranges{{3, 9}, {20, 31}}));
  EXPECT_EQ(e.within(0, 40), (Ranges{{3, 9}, {20, 31}}));
  EXPECT_EQ(e.within(5, 25), (Ranges{{0, 4}, {15, 20}}));  // starts and ends inside a range
  EXPECT_EQ(e.within(9, 20), Ranges{});                    // between two ranges
  EXPECT_EQ(e.within(30, 33), (Ranges{{0, 1}}));
}

TEST(DecayExemptions, AppendWithinPlacesEachWindowWhereTheBufferHoldsIt) {
  DecayExemptions e;
  e.add(3, 9);
  e.add(20, 31);
  Ranges shard;
  // zero3's shard: owned [6, 12) of one unit at 0, then owned [18, 22) of the next at 6; the
  // first window ends in a decaying stretch, so nothing joins across the seam.
  e.append_within(6, 12, 0, shard);
  e.append_within(18, 22, 6, shard);
  EXPECT_EQ(shard, (Ranges{{0, 3}, {8, 10}}));
  // Two windows that are exempt across their seam join.
  Ranges joined;
  e.append_within(4, 9, 0, joined);
  e.append_within(20, 22, 5, joined);
  EXPECT_EQ(joined, (Ranges{{0, 7}}));
}

TEST(DecayExemptions, RefusesEmptyOrOverlappingRanges) {
  DecayExemptions e;
  e.add(4, 8);
  EXPECT_THROW(e.add(6, 10), InvalidArgument);
  EXPECT_THROW(e.add(9, 9), InvalidArgument);
}

// Parameters of these sizes and flags, in two layers; the flags do not follow the shapes, so
// only the declaration can decide.
struct ProbeParam {
  Shape shape;
  bool decays;
};
const std::vector<std::vector<ProbeParam>> kProbeLayers = {
    {{{4099}, true}, {{3}, false}, {{6001}, false}},
    {{{5, 7}, true}, {{2003}, false}, {{4097}, true}}};
constexpr std::size_t kFeatures = 3;

// Passes its input through; adds nothing to its gradients, so they stay zero.
class PassThrough final : public Layer {
 public:
  explicit PassThrough(std::size_t index) : index_(index) {}
  [[nodiscard]] std::string name() const override { return "probe" + std::to_string(index_); }
  [[nodiscard]] std::vector<ParamSpec> parameters() const override {
    std::vector<ParamSpec> specs;
    for (const auto& p : kProbeLayers[index_]) {
      ParamSpec spec{"p" + std::to_string(specs.size()), p.shape, DType::f32, ParamInit::normal};
      spec.init_std = 1.0F;
      spec.weight_decay = p.decays;
      specs.push_back(spec);
    }
    return specs;
  }
  [[nodiscard]] Shape output_shape(const Shape& input) const override { return input; }
  Tensor forward(const Tensor& input, std::span<const BufferView> /*params*/,
                 LayerContext& /*ctx*/) const override {
    Tensor out(input.shape(), DType::f32);
    std::copy_n(input.as<float>().begin(), input.count(), out.as<float>().begin());
    return out;
  }
  Tensor backward(const Tensor& grad_output, std::span<const BufferView> /*params*/,
                  std::span<const BufferView> /*grads*/, LayerContext& /*ctx*/) const override {
    Tensor dx(grad_output.shape(), DType::f32);
    std::copy_n(grad_output.as<float>().begin(), grad_output.count(), dx.as<float>().begin());
    return dx;
  }

 private:
  std::size_t index_;
};

class ZeroGradientProbe final : public Model {
 public:
  ZeroGradientProbe() {
    for (std::size_t l = 0; l < kProbeLayers.size(); ++l) layers_.emplace_back(l);
  }
  [[nodiscard]] SampleLayout layout() const override {
    return {DType::f32, {kFeatures}, {}, kFeatures};
  }
  [[nodiscard]] std::size_t layer_count() const noexcept override { return layers_.size(); }
  [[nodiscard]] const Layer& layer(std::size_t index) const override { return layers_[index]; }
  [[nodiscard]] LossResult loss(const Tensor& logits, const Tensor& targets) const override {
    return {0.0, targets.count(), 0, Tensor(logits.shape(), DType::f32)};  // zero gradient
  }

 private:
  std::vector<PassThrough> layers_;
};

constexpr std::uint64_t kSeed = 5;
constexpr float kLr = 0.5F;
constexpr float kDecay = 0.25F;

std::unique_ptr<Strategy> make(const std::string& name) {
  if (name == "ddp") return std::make_unique<ddp::DdpStrategy>(ddp::DdpConfig{});
  if (name == "zero3") return std::make_unique<zero3::Zero3Strategy>(zero3::Zero3Config{});
  if (name == "hybrid_zero1") {
    hybrid::HybridConfig config;
    config.zero1 = true;
    return std::make_unique<hybrid::HybridStrategy>(config);
  }
  zero::ZeroConfig config;
  config.stage = name == "zero1" ? zero::ZeroStage::one : zero::ZeroStage::two;
  config.first_bucket_bytes = 4;  // 4096-element pieces: many piece edges inside parameters
  config.bucket_cap_bytes = 4;
  return std::make_unique<zero::ZeroStrategy>(config);
}

std::vector<float> parameters_after_one_step(const std::string& name, int ranks) {
  const auto model = std::make_shared<ZeroGradientProbe>();
  sgd::SgdConfig sgd;
  sgd.weight_decay = kDecay;
  const auto optimizer = std::make_shared<sgd::SgdOptimizer>(sgd);
  std::vector<float> result;
  testing::run_ranks(ranks, [&](std::shared_ptr<Communicator> world) {
    auto strategy = make(name);
    strategy->setup({world, model, optimizer, kSeed});
    Batch batch{Tensor({2, kFeatures}, DType::f32), Tensor({2}, DType::i64)};
    (void)strategy->train_step(batch, StepInfo{1, kLr});
    std::vector<float> params;
    if (auto* ddp = dynamic_cast<ddp::DdpStrategy*>(strategy.get())) {
      const auto p = ddp->parameters();
      params.assign(p.begin(), p.end());
    } else if (auto* zero = dynamic_cast<zero::ZeroStrategy*>(strategy.get())) {
      const auto p = zero->parameters();
      params.assign(p.begin(),
                    p.begin() + static_cast<std::ptrdiff_t>(FlatLayout::of(*model).total));
    } else if (auto* zero3 = dynamic_cast<zero3::Zero3Strategy*>(strategy.get())) {
      params = zero3->gather_parameters();
    } else {
      params = dynamic_cast<hybrid::HybridStrategy&>(*strategy).gather_parameters();
    }
    if (world->rank() == 0) result = std::move(params);
  });
  return result;
}

TEST(PerParameterWeightDecay, EveryStrategyDecaysExactlyTheParametersThatSaySo) {
  const ZeroGradientProbe model;
  const FlatLayout layout = FlatLayout::of(model);
  std::vector<float> initial(layout.total);
  std::vector<bool> decays(layout.total);
  std::size_t index = 0;
  for (std::size_t l = 0; l < model.layer_count(); ++l) {
    for (const auto& spec : model.layer(l).parameters()) {
      const auto& flat = layout.params[index];
      initialize_parameter(spec, kSeed, index, std::span(initial).subspan(flat.offset, flat.count));
      std::fill_n(decays.begin() + static_cast<std::ptrdiff_t>(flat.offset), flat.count,
                  spec.weight_decay);
      ++index;
    }
  }
  for (const std::string name : {"ddp", "zero1", "zero2", "zero3", "hybrid_zero1"}) {
    const auto params = parameters_after_one_step(name, 3);
    ASSERT_EQ(params.size(), layout.total) << name;
    std::size_t wrong = 0;
    for (std::size_t i = 0; i < layout.total; ++i) {
      const float p = initial[i];
      const float expected = decays[i] ? p - kLr * (0.0F + kDecay * p) : p;
      if (params[i] != expected && ++wrong <= 3) {
        ADD_FAILURE() << name << ": element " << i << " is " << params[i] << ", expected "
                      << expected << (decays[i] ? " (decays)" : " (exempt)");
      }
    }
    EXPECT_EQ(wrong, 0U) << name;
  }
}

}  // namespace
}  // namespace tessera
