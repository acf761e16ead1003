// The trainer over two local ranks: resuming reproduces the uninterrupted run bit for bit,
// and a damaged checkpoint is refused before anything trains.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

#include "ddp_strategy.hpp"
#include "ddp_test_support.hpp"
#include "mlp/mlp_model.hpp"
#include "sgd/sgd.hpp"
#include "synthetic/synthetic.hpp"
#include "tessera/checkpoint.hpp"
#include "tessera/error.hpp"
#include "tessera/trainer.hpp"

namespace tessera {
namespace {

namespace fs = std::filesystem;

class TrainerRuns : public ::testing::Test {
 protected:
  void SetUp() override {
    root_ = fs::temp_directory_path() /
            ("tessera-trainer-test-" + std::to_string(::getpid()) + "-" +
             ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(root_);
    mlp::MlpConfig sizes;
    sizes.sizes = {16, 32, 4};
    model_ = std::make_shared<mlp::MlpModel>(sizes);
    synthetic::SyntheticConfig data;
    data.samples = 500;  // not a multiple of the global batch: the last batch is uneven
    data.test_samples = 100;
    data.features = 16;
    data.classes = 4;
    data_ = std::make_shared<synthetic::SyntheticDataset>(data);
  }
  void TearDown() override { fs::remove_all(root_); }

  TrainerOptions options() const {
    TrainerOptions o;
    o.epochs = 2;
    o.batch_size = 16;
    o.schedule.base_lr = 0.05F;
    o.max_grad_norm = 1.0;
    o.seed = 11;
    o.progress = ProgressMode::off;
    return o;
  }

  // Rank 0's result of a two-rank run.
  TrainResult run(const TrainerOptions& o, bool resume) {
    TrainResult result;
    testing::run_ranks(2, [&](std::shared_ptr<Communicator> world) {
      TrainerComponents parts{
          world,
          model_,
          std::make_shared<sgd::SgdOptimizer>(sgd::SgdConfig{0.9F, 0.0F, 1e-4F, true}),
          data_,
          std::make_shared<ddp::DdpStrategy>(ddp::DdpConfig{}),
          "ddp"};
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

TEST_F(TrainerRuns, AResumedRunReproducesTheUninterruptedLossesBitwise) {
  const auto whole = run(options(), false);
  ASSERT_EQ(whole.steps, 32);  // 2 epochs of ceil(500 / 32) steps

  auto first = options();
  first.checkpoint_dir = root_;
  first.checkpoint_every = 5;
  first.max_steps = 13;  // stops mid-epoch, as a killed run would after its last checkpoint
  const auto interrupted = run(first, false);
  ASSERT_EQ(interrupted.steps, 13);

  auto second = options();
  second.checkpoint_dir = root_;
  const auto resumed = run(second, true);
  EXPECT_EQ(resumed.resumed_from_step, 13);
  EXPECT_EQ(resumed.steps, 32);
  const std::vector<double> expected(whole.losses.begin() + 13, whole.losses.end());
  EXPECT_EQ(resumed.losses, expected);
  EXPECT_EQ(std::vector<double>(whole.losses.begin(), whole.losses.begin() + 13),
            interrupted.losses);
  EXPECT_EQ(resumed.test_accuracy, whole.test_accuracy);
  EXPECT_GT(whole.test_accuracy, 0.5);  // it learns the synthetic task
}

TEST_F(TrainerRuns, ACorruptedLatestCheckpointIsRefusedAndTheEarlierOneStillResumes) {
  auto first = options();
  first.checkpoint_dir = root_;
  first.checkpoint_every = 4;
  first.max_steps = 8;
  run(first, false);
  const auto latest = latest_checkpoint(root_);
  ASSERT_TRUE(latest);
  for (const auto& entry : fs::directory_iterator(*latest)) {
    if (entry.path().extension() == ".bin") fs::resize_file(entry.path(), 8);  // truncated
  }
  auto second = options();
  second.checkpoint_dir = root_;
  try {
    run(second, true);
    FAIL() << "resumed from a truncated checkpoint";
  } catch (const CheckpointError& e) {
    EXPECT_NE(std::string(e.what()).find("step-000000000004"), std::string::npos) << e.what();
  }
  const FileCheckpointReader earlier(root_ / "step-000000000004");
  EXPECT_EQ(earlier.manifest().step, 4);
}

TEST_F(TrainerRuns, SummaryReportsEveryRanksMemory) {
  auto o = options();
  o.max_steps = 3;
  const auto result = run(o, false);
  ASSERT_EQ(result.ranks.size(), 2U);
  const std::size_t params = 16 * 32 + 32 + 32 * 4 + 4;
  for (const auto& r : result.ranks) {
    EXPECT_GT(r.peak_rss_bytes, 0U);
    EXPECT_EQ(r.memory.parameter_bytes, params * 4);
    EXPECT_EQ(r.memory.optimizer_state_bytes, params * 4);
  }
  const auto file = root_ / "summary.json";
  fs::create_directories(root_);
  write_summary_json(file, result);
  std::ifstream in(file);
  std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  EXPECT_NE(text.find("\"test_accuracy\""), std::string::npos);
  EXPECT_NE(text.find("\"peak_rss_bytes\""), std::string::npos);
  EXPECT_NE(text.find("\"steps\": 3"), std::string::npos);
}

}  // namespace
}  // namespace tessera
