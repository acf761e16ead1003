// zero1 and zero2 against ddp: the same data, seed and optimizer must give the same bits.
#include <gtest/gtest.h>

#include <cstring>

#include "ddp_strategy.hpp"
#include "ddp_test_support.hpp"
#include "zero_strategy.hpp"
#include "zero_test_support.hpp"

namespace tessera {
namespace {

using testing::run_ranks;

enum class Kind { ddp, zero1, zero2 };

struct RunSpec {
  Kind kind = Kind::ddp;
  int ranks = 2;
  int steps = 50;
  std::size_t batch = 8;  // per rank
  double max_grad_norm = 0.0;
  std::size_t micro_batches = 1;
  std::size_t staging_windows = 2;
};

struct Outcome {
  std::vector<std::vector<float>> params;  // per rank, the unpadded flat parameters
  std::vector<double> losses;              // rank 0, per step
  std::vector<double> norms;
};

std::unique_ptr<Strategy> make(Kind kind, std::size_t staging_windows = 2) {
  if (kind == Kind::ddp) {
    ddp::DdpConfig config;
    config.sync.first_bucket_bytes = 8192;
    config.sync.bucket_cap_bytes = 32768;
    return std::make_unique<ddp::DdpStrategy>(config);
  }
  zero::ZeroConfig config;
  config.stage = kind == Kind::zero1 ? zero::ZeroStage::one : zero::ZeroStage::two;
  config.first_bucket_bytes = 4;  // one norm block per rank: as many buckets as possible
  config.bucket_cap_bytes = 4;
  config.staging_windows = staging_windows;
  return std::make_unique<zero::ZeroStrategy>(config);
}

std::span<const float> parameters_of(Strategy& strategy, Kind kind, std::size_t total) {
  if (kind == Kind::ddp) return dynamic_cast<ddp::DdpStrategy&>(strategy).parameters();
  return dynamic_cast<zero::ZeroStrategy&>(strategy).parameters().first(total);
}

Outcome train(const RunSpec& spec) {
  const auto model = testing::zero_test_mlp();
  const auto data = testing::zero_test_data();
  const std::size_t total = FlatLayout::of(*model).total;
  Outcome outcome;
  outcome.params.resize(static_cast<std::size_t>(spec.ranks));
  run_ranks(spec.ranks, [&](std::shared_ptr<Communicator> world) {
    auto strategy = make(spec.kind);
    strategy->setup(
        {world, model, testing::zero_test_adam(), 11, spec.max_grad_norm, spec.micro_batches});
    const auto rank = static_cast<std::size_t>(world->rank());
    const std::size_t global = spec.batch * static_cast<std::size_t>(spec.ranks);
    for (int s = 0; s < spec.steps; ++s) {
      const auto rows = testing::consecutive(
          (static_cast<std::size_t>(s) * global + rank * spec.batch) % 2000, spec.batch);
      const auto stats =
          strategy->train_step(data->gather(Split::train, rows), StepInfo{s + 1, 1e-3F, global});
      if (rank == 0) {
        outcome.losses.push_back(stats.loss);
        outcome.norms.push_back(stats.grad_norm);
      }
    }
    const auto p = parameters_of(*strategy, spec.kind, total);
    outcome.params[rank].assign(p.begin(), p.end());
  });
  return outcome;
}

void expect_bitwise_equal(const Outcome& expected, const Outcome& actual) {
  ASSERT_EQ(expected.params.size(), actual.params.size());
  for (std::size_t r = 0; r < actual.params.size(); ++r) {
    ASSERT_EQ(expected.params[r].size(), actual.params[r].size());
    EXPECT_EQ(0, std::memcmp(expected.params[r].data(), actual.params[r].data(),
                             actual.params[r].size() * sizeof(float)))
        << "rank " << r << " parameters differ from ddp's";
  }
  EXPECT_EQ(expected.losses, actual.losses);
  EXPECT_EQ(expected.norms, actual.norms);
}

class ZeroMatchesDdp : public ::testing::TestWithParam<int> {};

TEST_P(ZeroMatchesDdp, ZeroOneAndZeroTwoGiveDdpParametersBitwiseAfterFiftyAdamSteps) {
  RunSpec spec;
  spec.ranks = GetParam();
  const auto ddp = train(spec);
  spec.kind = Kind::zero1;
  expect_bitwise_equal(ddp, train(spec));
  spec.kind = Kind::zero2;
  expect_bitwise_equal(ddp, train(spec));
  spec.staging_windows = 1;
  expect_bitwise_equal(ddp, train(spec));
}

TEST_P(ZeroMatchesDdp, GlobalNormClippingOverShardsGivesDdpBits) {
  RunSpec spec;
  spec.ranks = GetParam();
  spec.steps = 10;
  spec.max_grad_norm = 0.05;  // below the MLP's gradient norm, so every step clips
  const auto ddp = train(spec);
  ASSERT_GT(ddp.norms.front(), spec.max_grad_norm);
  spec.kind = Kind::zero1;
  expect_bitwise_equal(ddp, train(spec));
  spec.kind = Kind::zero2;
  expect_bitwise_equal(ddp, train(spec));
}

INSTANTIATE_TEST_SUITE_P(WorldSizes, ZeroMatchesDdp, ::testing::Values(2, 3, 4));

TEST(ZeroTwo, GradientAccumulationOverMicroBatchesGivesDdpBits) {
  RunSpec spec;
  spec.ranks = 3;
  spec.steps = 10;
  spec.micro_batches = 3;
  const auto ddp = train(spec);
  spec.kind = Kind::zero2;
  expect_bitwise_equal(ddp, train(spec));
}

TEST(ZeroTwo, UnevenLastBatchWithAnEmptyRankGivesDdpBits) {
  const auto model = testing::zero_test_mlp();
  const auto data = testing::zero_test_data();
  std::vector<std::vector<float>> result[2];
  for (int k = 0; k < 2; ++k) {
    const Kind kind = k == 0 ? Kind::ddp : Kind::zero2;
    result[k].resize(3);
    run_ranks(3, [&](std::shared_ptr<Communicator> world) {
      auto strategy = make(kind);
      strategy->setup({world, model, testing::zero_test_adam(), 5, 0.0, 1});
      const auto rank = static_cast<std::size_t>(world->rank());
      // 5 samples over 3 ranks: 3, 2, 0.
      const std::size_t rows = rank == 0 ? 3 : (rank == 1 ? 2 : 0);
      strategy->train_step(data->gather(Split::train, testing::consecutive(rank * 3, rows)),
                           StepInfo{1, 1e-2F, 5});
      const auto p = parameters_of(*strategy, kind, FlatLayout::of(*model).total);
      result[k][rank].assign(p.begin(), p.end());
    });
  }
  EXPECT_EQ(result[0], result[1]);
}

}  // namespace
}  // namespace tessera
