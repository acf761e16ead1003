// Every sharded strategy through the trainer, with Adam (whose bias correction depends on the
// step count) on a data set whose last batch is uneven:
// - a run interrupted after a checkpoint and resumed gives the uninterrupted run's losses and
//   test results bit for bit (state, data position and Adam's step count all restored);
// - 3 ranks with per-rank batch B give 1 rank with batch 3B to float tolerance.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <functional>
#include <memory>

#include "adam/adam.hpp"
#include "ddp_strategy.hpp"
#include "ddp_test_support.hpp"
#include "mlp/mlp_model.hpp"
#include "synthetic/synthetic.hpp"
#include "tessera/runtime/trainer.hpp"
#include "zero3_strategy.hpp"
#include "zero_strategy.hpp"

namespace tessera {
namespace {

namespace fs = std::filesystem;

std::shared_ptr<Strategy> make_strategy(const std::string& name) {
  if (name == "ddp") return std::make_shared<ddp::DdpStrategy>(ddp::DdpConfig{});
  if (name == "zero3") return std::make_shared<zero3::Zero3Strategy>(zero3::Zero3Config{});
  zero::ZeroConfig config;
  config.stage = name == "zero1" ? zero::ZeroStage::one : zero::ZeroStage::two;
  return std::make_shared<zero::ZeroStrategy>(config);
}

class StrategyThroughTrainer : public ::testing::TestWithParam<std::string> {
 protected:
  void SetUp() override {
    root_ = fs::temp_directory_path() /
            ("tessera-equivalence-" + std::to_string(::getpid()) + "-" + GetParam());
    fs::remove_all(root_);
    mlp::MlpConfig sizes;
    // 6,304 parameters: past one 4096-element norm block, so that zero1/2 shards at 2 and 3 ranks
    // give rank 1 real parameters (a model inside one block would sit on rank 0 alone, the
    // other shards all padding), and zero3's shards hold whole blocks.
    sizes.sizes = {16, 300, 4};
    model_ = std::make_shared<mlp::MlpModel>(sizes);
    synthetic::SyntheticConfig data;
    data.samples = 500;  // 500 = 20 x 24 + 20: the last global batch is uneven at 3 x 8
    data.test_samples = 100;
    data.features = 16;
    data.classes = 4;
    data_ = std::make_shared<synthetic::SyntheticDataset>(data);
  }
  void TearDown() override { fs::remove_all(root_); }

  TrainerOptions options(std::size_t batch) const {
    TrainerOptions o;
    o.epochs = 2;
    o.batch_size = batch;
    o.schedule.base_lr = 0.01F;
    o.seed = 5;
    o.progress = ProgressMode::off;
    return o;
  }

  TrainResult run(int ranks, const TrainerOptions& o, bool resume) {
    TrainResult result;
    testing::run_ranks(ranks, [&](std::shared_ptr<Communicator> world) {
      TrainerComponents parts{world,
                              model_,
                              std::make_shared<adam::AdamOptimizer>(adam::AdamConfig{}),
                              data_,
                              make_strategy(GetParam()),
                              GetParam()};
      Trainer trainer(o, parts);
      auto r = trainer.run(resume);
      if (world->rank() == 0) result = std::move(r);
    });
    return result;
  }

  fs::path root_;
  std::shared_ptr<const Model> model_;
  std::shared_ptr<const Dataset> data_;
};

TEST_P(StrategyThroughTrainer, AResumedRunEqualsTheUninterruptedOneBitwise) {
  const auto whole = run(2, options(16), false);
  ASSERT_EQ(whole.steps, 32);  // 2 epochs of ceil(500 / 32)

  auto first = options(16);
  first.checkpoint_dir = root_;
  first.checkpoint_every = 5;
  first.max_steps = 10;  // mid-epoch, on a checkpoint
  const auto interrupted = run(2, first, false);
  ASSERT_EQ(interrupted.steps, 10);

  auto second = options(16);
  second.checkpoint_dir = root_;
  const auto resumed = run(2, second, true);
  EXPECT_EQ(resumed.resumed_from_step, 10);
  EXPECT_EQ(resumed.steps, 32);
  const std::vector<double> rest(whole.losses.begin() + 10, whole.losses.end());
  EXPECT_EQ(resumed.losses, rest);
  EXPECT_EQ(resumed.test_loss, whole.test_loss);
  EXPECT_EQ(resumed.test_accuracy, whole.test_accuracy);
}

TEST_P(StrategyThroughTrainer, ThreeRanksOfBatchBMatchOneRankOfBatchThreeB) {
  const auto three = run(3, options(8), false);
  const auto one = run(1, options(24), false);
  ASSERT_EQ(three.steps, 42);  // 2 epochs of ceil(500 / 24): the 21st batch has 20 samples
  ASSERT_EQ(one.steps, three.steps);
  ASSERT_EQ(one.losses.size(), three.losses.size());
  double worst = 0.0;
  for (std::size_t s = 0; s < one.losses.size(); ++s)
    worst = std::max(worst, std::abs(three.losses[s] - one.losses[s]) / std::abs(one.losses[s]));
  EXPECT_LT(worst, 1e-4) << "largest relative loss difference over " << one.losses.size()
                         << " steps";
  EXPECT_NEAR(three.test_loss, one.test_loss, 1e-4 * std::abs(one.test_loss));
  EXPECT_GT(one.test_accuracy, 0.5);  // it learns: the comparison is not between two no-ops
}

INSTANTIATE_TEST_SUITE_P(Strategies, StrategyThroughTrainer,
                         ::testing::Values("ddp", "zero1", "zero2", "zero3"),
                         [](const auto& test) { return test.param; });

}  // namespace
}  // namespace tessera
