#include <gtest/gtest.h>

#include <cmath>
#include <cstring>

#include "mlp/mlp_model.hpp"
#include "sgd/sgd.hpp"
#include "synthetic/synthetic.hpp"
#include "tessera/base/error.hpp"
#include "tessera/runtime/data_order.hpp"
#include "tessera/strategy_kit/init.hpp"

namespace tessera::mlp {
namespace {

// Parameters and gradients of a model, one buffer per ParamSpec, as a single-process strategy
// would hold them.
struct ModelState {
  std::vector<std::vector<std::vector<float>>> params;  // [layer][param]
  std::vector<std::vector<std::vector<float>>> grads;

  ModelState(const Model& model, std::uint64_t seed) {
    std::size_t index = 0;
    for (std::size_t l = 0; l < model.layer_count(); ++l) {
      params.emplace_back();
      grads.emplace_back();
      for (const ParamSpec& spec : model.layer(l).parameters()) {
        params[l].emplace_back(element_count(spec.shape));
        grads[l].emplace_back(element_count(spec.shape));
        initialize_parameter(spec, seed, index++, params[l].back());
      }
    }
  }

  static std::vector<BufferView> views(std::vector<std::vector<float>>& buffers) {
    std::vector<BufferView> out;
    for (auto& b : buffers) out.push_back(view_of(std::span<float>(b)));
    return out;
  }

  // One forward and backward pass; returns the loss.
  double forward_backward(const Model& model, const Batch& batch) {
    std::vector<LayerContext> contexts(model.layer_count());
    contexts[0].set_input_gradient_needed(false);
    Tensor x = batch.inputs.alias();
    for (std::size_t l = 0; l < model.layer_count(); ++l) {
      x = model.layer(l).forward(x, views(params[l]), contexts[l]);
    }
    LossResult loss = model.loss(x, batch.targets);
    Tensor grad = std::move(loss.grad_logits);
    for (std::size_t l = model.layer_count(); l-- > 0;) {
      grad = model.layer(l).backward(grad, views(params[l]), views(grads[l]), contexts[l]);
    }
    return loss.mean();
  }

  void step(const Optimizer& optimizer, const StepInfo& info,
            std::vector<std::vector<float>>& state) {
    std::size_t k = 0;
    for (std::size_t l = 0; l < params.size(); ++l) {
      for (std::size_t p = 0; p < params[l].size(); ++p, ++k) {
        if (state.size() <= k)
          state.emplace_back(params[l][p].size() * optimizer.state_per_param());
        optimizer.step(params[l][p], grads[l][p], state[k], info);
        std::fill(grads[l][p].begin(), grads[l][p].end(), 0.0F);
      }
    }
  }
};

TEST(MlpModel, BuildsLinearAndActivationLayersFromItsSizes) {
  const MlpModel model(MlpConfig{{784, 64, 32, 10}, layers::ActivationKind::gelu, 1});
  ASSERT_EQ(model.layer_count(), 5U);  // fc0 act0 fc1 act1 fc2
  EXPECT_EQ(model.layer(0).name(), "fc0");
  EXPECT_EQ(model.layer(1).name(), "act0");
  EXPECT_EQ(model.layer(4).name(), "fc2");
  EXPECT_TRUE(model.layer(1).parameters().empty());
  EXPECT_EQ(model.layer(4).parameters()[0].shape, (Shape{10, 32}));
  EXPECT_EQ(model.layout(), (SampleLayout{DType::f32, {784}, {}, 10}));
}

TEST(MlpModel, ParsesLayerSizesAndRejectsBadOnes) {
  EXPECT_EQ(parse_layer_sizes("784, 256,10"), (std::vector<std::size_t>{784, 256, 10}));
  EXPECT_THROW((void)parse_layer_sizes("784"), ConfigError);
  EXPECT_THROW((void)parse_layer_sizes("784,,10"), ConfigError);
  EXPECT_THROW((void)parse_layer_sizes("784,0,10"), ConfigError);
  EXPECT_THROW((void)parse_layer_sizes("784,x10"), ConfigError);
}

TEST(MlpModel, SgdOnSyntheticDataClearlyReducesTheLoss) {
  const MlpModel model(MlpConfig{{784, 64, 10}, layers::ActivationKind::relu, 1});
  const synthetic::SyntheticDataset data(synthetic::SyntheticConfig{4096, 0, 784, 10, 3});
  const sgd::SgdOptimizer sgd(sgd::SgdConfig{0.9F, 0.0F, 0.0F, false});
  ModelState state(model, 42);
  std::vector<std::vector<float>> optimizer_state;
  constexpr std::size_t kBatch = 64;
  constexpr std::int64_t kSteps = 300;
  double first = 0.0;
  double last_average = 0.0;
  std::int64_t step = 0;
  for (std::uint64_t epoch = 0; step < kSteps; ++epoch) {
    const EpochShard shard(EpochShardSpec{data.size(Split::train), epoch, 1, 0, 1, kBatch});
    for (std::size_t s = 0; s < shard.steps() && step < kSteps; ++s) {
      const double loss = state.forward_backward(model, data.gather(Split::train, shard.batch(s)));
      ++step;
      if (step == 1) first = loss;
      if (step > kSteps - 20) last_average += loss / 20.0;
      state.step(sgd, StepInfo{step, 0.01F}, optimizer_state);
    }
  }
  EXPECT_GT(first, 0.8 * std::log(10.0)) << "an untrained model guesses";
  EXPECT_LT(last_average, 0.4 * first) << "first loss " << first;
}

TEST(MlpModel, TrainingIsBitwiseReproducible) {
  auto run = [] {
    const MlpModel model(MlpConfig{{20, 16, 4}, layers::ActivationKind::gelu, 2});
    const synthetic::SyntheticDataset data(synthetic::SyntheticConfig{256, 0, 20, 4, 5});
    const sgd::SgdOptimizer sgd(sgd::SgdConfig{0.9F, 0.0F, 1e-4F, true});
    ModelState state(model, 9);
    std::vector<std::vector<float>> optimizer_state;
    const EpochShard shard(EpochShardSpec{256, 0, 1, 0, 1, 32});
    for (std::size_t s = 0; s < shard.steps(); ++s) {
      (void)state.forward_backward(model, data.gather(Split::train, shard.batch(s)));
      state.step(sgd, StepInfo{static_cast<std::int64_t>(s) + 1, 0.05F}, optimizer_state);
    }
    return state.params;
  };
  const auto a = run();
  const auto b = run();
  ASSERT_EQ(a.size(), b.size());
  for (std::size_t l = 0; l < a.size(); ++l) {
    for (std::size_t p = 0; p < a[l].size(); ++p) {
      EXPECT_EQ(std::memcmp(a[l][p].data(), b[l][p].data(), a[l][p].size() * sizeof(float)), 0);
    }
  }
}

}  // namespace
}  // namespace tessera::mlp
