// The ddp strategy over the local transport with the reference MLP and synthetic data.
#include "ddp_strategy.hpp"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <numeric>

#include "ddp_test_support.hpp"
#include "mlp/mlp_model.hpp"
#include "sgd/sgd.hpp"
#include "synthetic/synthetic.hpp"

namespace tessera {
namespace {

using testing::run_ranks;

std::shared_ptr<const Model> small_mlp() {
  mlp::MlpConfig config;
  config.sizes = {16, 32, 32, 4};
  return std::make_shared<mlp::MlpModel>(config);
}

std::shared_ptr<const Dataset> small_data() {
  synthetic::SyntheticConfig config;
  config.samples = 512;
  config.test_samples = 64;
  config.features = 16;
  config.classes = 4;
  return std::make_shared<synthetic::SyntheticDataset>(config);
}

std::shared_ptr<const Optimizer> momentum_sgd() {
  return std::make_shared<sgd::SgdOptimizer>(sgd::SgdConfig{0.9F, 0.0F, 0.0F, false});
}

std::vector<std::size_t> iota_from(std::size_t begin, std::size_t n) {
  std::vector<std::size_t> v(n);
  std::iota(v.begin(), v.end(), begin);
  return v;
}

struct RunSpec {
  int ranks = 1;
  std::size_t batch = 8;  // per rank
  int steps = 20;
  std::size_t micro_batches = 1;
  double max_grad_norm = 0.0;
  GradientCompression compression = GradientCompression::none;
};

// Step s uses global samples [s * G, (s + 1) * G), rank r rows [r * B, (r + 1) * B) of them.
// Returns every rank's parameters after every step: result[rank][step].
std::vector<std::vector<std::vector<float>>> train(const RunSpec& spec) {
  const auto model = small_mlp();
  const auto data = small_data();
  std::vector<std::vector<std::vector<float>>> params(static_cast<std::size_t>(spec.ranks));
  run_ranks(spec.ranks, [&](std::shared_ptr<Communicator> world) {
    ddp::DdpConfig config;
    config.sync.first_bucket_bytes = 1024;  // several buckets even for a small model
    config.sync.bucket_cap_bytes = 4096;
    config.sync.compression = spec.compression;
    ddp::DdpStrategy strategy(config);
    strategy.setup({world, model, momentum_sgd(), 7, spec.max_grad_norm, spec.micro_batches});
    const auto rank = static_cast<std::size_t>(world->rank());
    const std::size_t global = spec.batch * static_cast<std::size_t>(spec.ranks);
    for (int s = 0; s < spec.steps; ++s) {
      const auto indices =
          iota_from(static_cast<std::size_t>(s) * global + rank * spec.batch, spec.batch);
      strategy.train_step(data->gather(Split::train, indices), StepInfo{s + 1, 0.05F, global});
      const auto p = strategy.parameters();
      params[rank].emplace_back(p.begin(), p.end());
    }
  });
  return params;
}

double max_relative_difference(const std::vector<float>& a, const std::vector<float>& b) {
  double diff = 0.0, scale = 0.0;
  for (std::size_t i = 0; i < a.size(); ++i) {
    diff = std::max(diff, static_cast<double>(std::fabs(a[i] - b[i])));
    scale = std::max(scale, static_cast<double>(std::fabs(b[i])));
  }
  return diff / scale;
}

TEST(DdpStrategy, AllRanksHoldBitwiseIdenticalParametersAfterEveryStep) {
  const auto params = train({.ranks = 3, .batch = 8, .steps = 10, .max_grad_norm = 0.5});
  for (std::size_t s = 0; s < params[0].size(); ++s) {
    ASSERT_EQ(params[0][s], params[1][s]) << "step " << s + 1;
    ASSERT_EQ(params[0][s], params[2][s]) << "step " << s + 1;
  }
  EXPECT_NE(params[0].front(), params[0].back());  // it did train
}

TEST(DdpStrategy, TwoRanksWithBatchBMatchOneRankWithBatch2BAfterTwentySteps) {
  const auto two = train({.ranks = 2, .batch = 8, .steps = 20});
  const auto one = train({.ranks = 1, .batch = 16, .steps = 20});
  EXPECT_LT(max_relative_difference(two[0].back(), one[0].back()), 1e-5);
}

TEST(DdpStrategy, MicroBatchesAccumulateToTheSameUpdateAsOneBatch) {
  const auto accumulated = train({.ranks = 2, .batch = 8, .steps = 10, .micro_batches = 4});
  const auto whole = train({.ranks = 2, .batch = 8, .steps = 10});
  EXPECT_LT(max_relative_difference(accumulated[0].back(), whole[0].back()), 1e-5);
}

TEST(DdpStrategy, Bf16CompressionTrainsCloseToFp32) {
  const auto compressed =
      train({.ranks = 2, .batch = 8, .steps = 10, .compression = GradientCompression::bf16});
  const auto exact = train({.ranks = 2, .batch = 8, .steps = 10});
  EXPECT_EQ(compressed[0].back(), compressed[1].back());
  EXPECT_LT(max_relative_difference(compressed[0].back(), exact[0].back()), 2e-2);
}

// A model whose layers log when their backward starts and ends, to see communication
// interleave with computation.
class LoggedLayer final : public Layer {
 public:
  LoggedLayer(const Layer& inner, std::size_t index, std::shared_ptr<testing::EventLog> log)
      : inner_(inner), index_(index), log_(std::move(log)) {}
  std::string name() const override { return inner_.name(); }
  std::vector<ParamSpec> parameters() const override { return inner_.parameters(); }
  Shape output_shape(const Shape& input) const override { return inner_.output_shape(input); }
  Tensor forward(const Tensor& input, std::span<const BufferView> params,
                 LayerContext& ctx) const override {
    return inner_.forward(input, params, ctx);
  }
  Tensor backward(const Tensor& grad_output, std::span<const BufferView> params,
                  std::span<const BufferView> grads, LayerContext& ctx) const override {
    auto result = inner_.backward(grad_output, params, grads, ctx);
    log_->add("backward done " + std::to_string(index_));
    return result;
  }

 private:
  const Layer& inner_;
  std::size_t index_;
  std::shared_ptr<testing::EventLog> log_;
};

class LoggedModel final : public Model {
 public:
  LoggedModel(std::shared_ptr<const Model> inner, std::shared_ptr<testing::EventLog> log)
      : inner_(std::move(inner)) {
    for (std::size_t l = 0; l < inner_->layer_count(); ++l)
      layers_.emplace_back(inner_->layer(l), l, log);
  }
  SampleLayout layout() const override { return inner_->layout(); }
  std::size_t layer_count() const noexcept override { return layers_.size(); }
  const Layer& layer(std::size_t index) const override { return layers_.at(index); }
  LossResult loss(const Tensor& logits, const Tensor& targets) const override {
    return inner_->loss(logits, targets);
  }

 private:
  std::shared_ptr<const Model> inner_;
  std::vector<LoggedLayer> layers_;
};

TEST(DdpStrategy, TheFirstBucketIsAllReducedBeforeBackwardOfTheFirstLayerFinishes) {
  auto log = std::make_shared<testing::EventLog>();
  auto world = std::make_shared<testing::RecordingCommunicator>(log, 2);
  mlp::MlpConfig sizes;
  sizes.sizes = {784, 256, 256, 10};  // Linear 0, ReLU 1, Linear 2, ReLU 3, Linear 4
  auto model = std::make_shared<LoggedModel>(std::make_shared<mlp::MlpModel>(sizes), log);
  ddp::DdpConfig config;
  config.sync.first_bucket_bytes = 64 * 1024;  // the last two Linear layers (~270 KB)
  config.sync.bucket_cap_bytes = 25 * 1024 * 1024;
  ddp::DdpStrategy strategy(config);
  strategy.setup({world, model, momentum_sgd(), 1, 0.0, 1});
  synthetic::SyntheticConfig data_config;
  data_config.samples = 16;
  data_config.test_samples = 16;
  const synthetic::SyntheticDataset data(data_config);
  strategy.train_step(data.gather(Split::train, iota_from(0, 16)), StepInfo{1, 0.01F, 32});

  ASSERT_EQ(strategy.synchronizer().buckets().size(), 2U);
  const long first_bucket = log->index_of("all_reduce 0");
  ASSERT_GE(first_bucket, 0);
  EXPECT_GT(first_bucket, log->index_of("backward done 2"));  // its gradients exist...
  EXPECT_LT(first_bucket, log->index_of("backward done 0"));  // ...and backward is not over
  EXPECT_GT(log->index_of("all_reduce 1"), log->index_of("backward done 0"));
}

TEST(DdpStrategy, MemoryReportCountsParametersGradientsAndMomentum) {
  auto world =
      std::make_shared<testing::RecordingCommunicator>(std::make_shared<testing::EventLog>(), 1);
  ddp::DdpStrategy strategy(ddp::DdpConfig{});
  strategy.setup({world, small_mlp(), momentum_sgd(), 1, 0.0, 1});
  const std::size_t params = 16 * 32 + 32 + 32 * 32 + 32 + 32 * 4 + 4;
  const auto report = strategy.memory_report();
  EXPECT_EQ(report.parameter_bytes, params * 4);
  EXPECT_EQ(report.gradient_bytes, params * 4);
  EXPECT_EQ(report.optimizer_state_bytes, params * 4);
  EXPECT_EQ(report.buffer_bytes, 0U);
}

}  // namespace
}  // namespace tessera
