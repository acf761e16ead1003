// The zero3 (fsdp) strategy against ddp over the local transport: the same data, the same
// initialisation and the same rank-order reductions must give the same bits.
#include "zero3_strategy.hpp"

#include <gtest/gtest.h>

#include <filesystem>
#include <numeric>
#include <span>

#include "adam/adam.hpp"
#include "ddp_strategy.hpp"
#include "ddp_test_support.hpp"
#include "mlp/mlp_model.hpp"
#include "synthetic/synthetic.hpp"
#include "tessera/runtime/checkpoint.hpp"

namespace tessera {
namespace {

using testing::run_ranks;

// Several Linear layers whose sizes put unit and shard edges inside 4096-element norm blocks.
// Every unit's shard is shorter than a block, so every block is cut between ranks.
constexpr std::size_t kDeepSizes[] = {24, 72, 60, 40, 10};
// A 64 x 512 layer between small ones: its shard holds whole norm blocks on every rank of up
// to 4, which only their owner sums (ShardedGradNorm's other path).
constexpr std::size_t kWideSizes[] = {24, 64, 512, 10};

std::shared_ptr<const Model> deep_mlp(std::span<const std::size_t> sizes = kDeepSizes) {
  mlp::MlpConfig config;
  config.sizes.assign(sizes.begin(), sizes.end());
  return std::make_shared<mlp::MlpModel>(config);
}

std::shared_ptr<const Dataset> data() {
  synthetic::SyntheticConfig config;
  config.samples = 2048;
  config.test_samples = 64;
  config.features = 24;
  config.classes = 10;
  return std::make_shared<synthetic::SyntheticDataset>(config);
}

std::shared_ptr<const Optimizer> adam() {
  return std::make_shared<adam::AdamOptimizer>(adam::AdamConfig{});
}

struct RunSpec {
  int ranks = 2;
  std::size_t batch = 8;  // per rank
  int steps = 50;
  std::size_t micro_batches = 1;
  double max_grad_norm = 0.0;
  std::size_t short_rank_rows = 0;  // if > 0, the last rank gets this many rows fewer
  std::span<const std::size_t> sizes = kDeepSizes;
};

struct RunResult {
  std::vector<float> params;  // rank 0's full parameters after the last step
  std::vector<double> losses;
  std::vector<double> norms;
};

// Step s uses global samples [s * G, ...); rank r takes rows [r * B, (r + 1) * B) of them.
template <class Strategy>
void drive(Strategy& strategy, const Communicator& world, const RunSpec& spec, int first_step,
           RunResult& out) {
  const auto rank = static_cast<std::size_t>(world.rank());
  const auto ranks = static_cast<std::size_t>(spec.ranks);
  const std::size_t global = spec.batch * ranks - spec.short_rank_rows;
  const auto dataset = data();
  for (int s = first_step; s < first_step + spec.steps; ++s) {
    std::size_t rows = spec.batch;
    if (rank + 1 == ranks) rows -= spec.short_rank_rows;
    std::vector<std::size_t> indices(rows);
    std::iota(indices.begin(), indices.end(),
              static_cast<std::size_t>(s) * global + rank * spec.batch);
    const auto stats =
        strategy.train_step(dataset->gather(Split::train, indices), StepInfo{s + 1, 1e-3F, global});
    out.losses.push_back(stats.loss);
    out.norms.push_back(stats.grad_norm);
  }
}

RunResult run_ddp(const RunSpec& spec) {
  RunResult result;
  run_ranks(spec.ranks, [&](std::shared_ptr<Communicator> world) {
    ddp::DdpStrategy strategy(ddp::DdpConfig{});
    strategy.setup(
        {world, deep_mlp(spec.sizes), adam(), 11, spec.max_grad_norm, spec.micro_batches});
    RunResult mine;
    drive(strategy, *world, spec, 0, mine);
    if (world->rank() == 0) {
      mine.params.assign(strategy.parameters().begin(), strategy.parameters().end());
      result = mine;
    }
  });
  return result;
}

RunResult run_zero3(const RunSpec& spec, const zero3::Zero3Config& config = {}) {
  RunResult result;
  run_ranks(spec.ranks, [&](std::shared_ptr<Communicator> world) {
    zero3::Zero3Strategy strategy(config);
    strategy.setup(
        {world, deep_mlp(spec.sizes), adam(), 11, spec.max_grad_norm, spec.micro_batches});
    RunResult mine;
    drive(strategy, *world, spec, 0, mine);
    mine.params = strategy.gather_parameters();
    if (world->rank() == 0) result = mine;
  });
  return result;
}

void expect_bitwise_equal(const RunResult& zero3, const RunResult& ddp) {
  ASSERT_EQ(zero3.params.size(), ddp.params.size());
  EXPECT_TRUE(zero3.params == ddp.params) << "parameters differ";
  EXPECT_EQ(zero3.losses, ddp.losses);
  EXPECT_EQ(zero3.norms, ddp.norms);
}

class Zero3AtWorldSize : public ::testing::TestWithParam<int> {};

TEST_P(Zero3AtWorldSize, ParametersBitwiseIdenticalToDdpAfterFiftyAdamStepsWithClipping) {
  const RunSpec spec{.ranks = GetParam(), .steps = 50, .max_grad_norm = 0.5};
  const auto ddp = run_ddp(spec);
  const auto zero3 = run_zero3(spec);
  expect_bitwise_equal(zero3, ddp);
  EXPECT_LT(ddp.norms.front(), 100.0);
  EXPECT_GT(*std::max_element(ddp.norms.begin(), ddp.norms.end()), 0.5);  // clipping did act
}

TEST_P(Zero3AtWorldSize, NormBlocksInsideSingleShardsClipAsDdpDoesBitwise) {
  const RunSpec spec{.ranks = GetParam(), .steps = 10, .max_grad_norm = 0.5, .sizes = kWideSizes};
  const auto ddp = run_ddp(spec);
  const auto zero3 = run_zero3(spec);
  expect_bitwise_equal(zero3, ddp);
  EXPECT_GT(*std::max_element(ddp.norms.begin(), ddp.norms.end()), 0.5);  // clipping did act
}

INSTANTIATE_TEST_SUITE_P(WorldSizes, Zero3AtWorldSize, ::testing::Values(2, 3, 4));

TEST(Zero3Strategy, KeepingParametersUntilBackwardWithoutPrefetchMatchesDdpBitwise) {
  const RunSpec spec{.ranks = 3, .steps = 10, .max_grad_norm = 0.5};
  expect_bitwise_equal(
      run_zero3(spec,
                {.reshard_after_forward = false, .prefetch = 0, .unit_size = 1, .max_inflight = 1}),
      run_ddp(spec));
}

TEST(Zero3Strategy, TwoLayerUnitsWithDeepPrefetchMatchDdpBitwise) {
  const RunSpec spec{.ranks = 4, .steps = 10};
  expect_bitwise_equal(
      run_zero3(spec,
                {.reshard_after_forward = true, .prefetch = 3, .unit_size = 2, .max_inflight = 3}),
      run_ddp(spec));
}

TEST(Zero3Strategy, MicroBatchesAndAShortLastRankMatchDdpBitwise) {
  const RunSpec spec{.ranks = 3,
                     .batch = 6,
                     .steps = 10,
                     .micro_batches = 4,
                     .max_grad_norm = 0.5,
                     .short_rank_rows = 4};
  expect_bitwise_equal(run_zero3(spec), run_ddp(spec));
}

TEST(Zero3Strategy, ARankWithNoRowsStillTakesPartInEveryCollective) {
  const RunSpec spec{.ranks = 2, .batch = 4, .steps = 5, .short_rank_rows = 4};
  expect_bitwise_equal(run_zero3(spec), run_ddp(spec));
}

TEST(Zero3Strategy, EachRankHoldsItsShareOfStateAndAtMostThreeGatheredUnits) {
  const std::size_t total = 24 * 72 + 72 + 72 * 60 + 60 + 60 * 40 + 40 + 40 * 10 + 10;
  run_ranks(4, [&](std::shared_ptr<Communicator> world) {
    zero3::Zero3Strategy strategy(zero3::Zero3Config{});
    strategy.setup({world, deep_mlp(), adam(), 11, 0.0, 1});
    RunResult ignored;
    drive(strategy, *world, RunSpec{.ranks = 4, .steps = 3}, 0, ignored);
    const auto report = strategy.memory_report();
    const auto& plan = strategy.plan();
    ASSERT_EQ(plan.units.size(), 4U);  // one per Linear; each ReLU rides with its Linear
    EXPECT_EQ(report.parameter_bytes, plan.shard_total * sizeof(float));
    EXPECT_GE(plan.shard_total * 4, total);
    EXPECT_LE(plan.shard_total * 4, total + 4 * 4 * 16);  // padding: under 16 per unit and rank
    EXPECT_EQ(report.gradient_bytes, report.parameter_bytes);
    EXPECT_EQ(report.optimizer_state_bytes, 2 * report.parameter_bytes);
    EXPECT_LE(strategy.pool_buffers(), 3U);
    EXPECT_GE(report.buffer_bytes, strategy.pool_buffers() * plan.largest_gathered * sizeof(float));
  });
}

TEST(Zero3Strategy, CheckpointFromWorldFourResumesAtWorldsTwoAndThreeAndAsDdpBitwise) {
  const auto root =
      std::filesystem::temp_directory_path() / ("tessera_zero3_ckpt_" + std::to_string(::getpid()));
  std::filesystem::remove_all(root);
  std::vector<float> saved;
  run_ranks(4, [&](std::shared_ptr<Communicator> world) {
    zero3::Zero3Strategy strategy(zero3::Zero3Config{});
    strategy.setup({world, deep_mlp(), adam(), 11, 0.0, 1});
    RunResult ignored;
    drive(strategy, *world, RunSpec{.ranks = 4, .steps = 5}, 0, ignored);
    write_checkpoint(
        root, 5, {}, *world, [&](CheckpointWriter& w) { strategy.save(w); }, {},
        testing::kTestTimeout);
    auto full = strategy.gather_parameters();
    if (world->rank() == 0) saved = full;
  });
  const auto folder = latest_checkpoint(root);
  ASSERT_TRUE(folder.has_value());
  const FileCheckpointReader reader(*folder);
  const RunSpec next{.ranks = 2, .steps = 5};
  RunResult as_ddp;
  run_ranks(2, [&](std::shared_ptr<Communicator> world) {
    ddp::DdpStrategy strategy(ddp::DdpConfig{});
    strategy.setup({world, deep_mlp(), adam(), 99, 0.0, 1});  // other seed: load must overwrite
    strategy.load(reader);
    RunResult mine;
    drive(strategy, *world, next, 5, mine);
    if (world->rank() == 0)
      as_ddp.params.assign(strategy.parameters().begin(), strategy.parameters().end());
  });
  for (const int ranks : {2, 3}) {
    RunResult as_zero3;
    run_ranks(ranks, [&](std::shared_ptr<Communicator> world) {
      zero3::Zero3Strategy strategy(zero3::Zero3Config{});
      strategy.setup({world, deep_mlp(), adam(), 99, 0.0, 1});
      strategy.load(reader);
      auto loaded = strategy.gather_parameters();
      if (world->rank() == 0) {
        EXPECT_TRUE(loaded == saved) << "world " << ranks;
      }
      if (ranks == 2) {
        RunResult mine;
        drive(strategy, *world, next, 5, mine);
        auto full = strategy.gather_parameters();
        if (world->rank() == 0) as_zero3.params = full;
      }
    });
    if (ranks == 2) {
      EXPECT_TRUE(as_zero3.params == as_ddp.params) << "optimizer state resharded";
    }
  }
  std::filesystem::remove_all(root);
}

}  // namespace
}  // namespace tessera
