// Training that goes wrong says so: a non-finite step stops the run naming it (or, asked to,
// is skipped on every rank without an update and counted), and metrics or a summary that
// cannot be written are errors naming the file, never a clean exit with a file left empty.
#include <gtest/gtest.h>
#include <sys/mount.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <map>
#include <mutex>
#include <string>

#include "ddp_strategy.hpp"
#include "ddp_test_support.hpp"
#include "mlp/mlp_model.hpp"
#include "sgd/sgd.hpp"
#include "synthetic/synthetic.hpp"
#include "tessera/base/error.hpp"
#include "tessera/runtime/checkpoint.hpp"
#include "tessera/runtime/trainer.hpp"

namespace tessera {
namespace {

namespace fs = std::filesystem;

class TrainerFailures : public ::testing::Test {
 protected:
  void SetUp() override {
    mlp::MlpConfig sizes;
    sizes.sizes = {16, 32, 4};
    model_ = std::make_shared<mlp::MlpModel>(sizes);
    synthetic::SyntheticConfig data;
    data.samples = 256;
    data.test_samples = 64;
    data.features = 16;
    data.classes = 4;
    data_ = std::make_shared<synthetic::SyntheticDataset>(data);
  }

  static TrainerOptions options() {
    TrainerOptions o;
    o.epochs = 1;
    o.batch_size = 16;
    o.schedule.base_lr = 0.05F;
    o.seed = 3;
    o.progress = ProgressMode::off;
    return o;
  }

  // Rank 0's result of a run over `ranks` local ranks; counts the ranks that threw
  // TrainingError and keeps the last message.
  TrainResult run(const TrainerOptions& o, int ranks = 2) {
    TrainResult result;
    training_errors_ = 0;
    testing::run_ranks(ranks, [&](std::shared_ptr<Communicator> world) {
      TrainerComponents parts{
          world,
          model_,
          std::make_shared<sgd::SgdOptimizer>(sgd::SgdConfig{0.9F, 0.0F, 0.0F, false}),
          data_,
          std::make_shared<ddp::DdpStrategy>(ddp::DdpConfig{}),
          "ddp"};
      try {
        auto r = Trainer(o, parts).run(false);
        if (world->rank() == 0) result = std::move(r);
      } catch (const TrainingError& e) {
        ++training_errors_;
        std::lock_guard lock(mutex_);
        message_ = e.what();
      }
    });
    return result;
  }

  std::shared_ptr<const Model> model_;
  std::shared_ptr<const Dataset> data_;
  std::atomic<int> training_errors_{0};
  std::mutex mutex_;
  std::string message_;
};

TEST_F(TrainerFailures, NonFiniteLossStopsEveryRankNamingTheStep) {
  auto o = options();
  o.schedule.base_lr = 1e30F;
  run(o);
  EXPECT_EQ(training_errors_, 2);  // the same decision on both ranks
  EXPECT_NE(message_.find("step 2 is not finite (loss "), std::string::npos) << message_;
  EXPECT_NE(message_.find("on_nonfinite = skip"), std::string::npos) << message_;
  EXPECT_EQ(message_.find(".cpp"), std::string::npos) << message_;
}

TEST_F(TrainerFailures, AnEmptyTestSplitIsADataErrorBeforeAnyStep) {
  synthetic::SyntheticConfig config;
  config.samples = 64;
  config.test_samples = 0;
  config.features = 16;
  config.classes = 4;
  data_ = std::make_shared<synthetic::SyntheticDataset>(config);
  std::atomic<int> refused{0};
  std::string message;
  std::mutex mutex;
  testing::run_ranks(2, [&](std::shared_ptr<Communicator> world) {
    TrainerComponents parts{
        world,
        model_,
        std::make_shared<sgd::SgdOptimizer>(sgd::SgdConfig{0.0F, 0.0F, 0.0F, false}),
        data_,
        std::make_shared<ddp::DdpStrategy>(ddp::DdpConfig{}),
        "ddp"};
    try {
      (void)Trainer(options(), parts).run(false);
    } catch (const DataError& e) {
      ++refused;
      std::lock_guard lock(mutex);
      message = e.what();
    }
  });
  // An accuracy over no samples would otherwise be reported as 0 % with exit 0.
  EXPECT_EQ(refused, 2);
  EXPECT_NE(message.find("the test split has no samples"), std::string::npos) << message;
}

TEST_F(TrainerFailures, NonFiniteStepIsCaughtWithClippingToo) {
  auto o = options();
  o.schedule.base_lr = 1e30F;
  o.max_grad_norm = 1.0;
  run(o);
  EXPECT_EQ(training_errors_, 2);
  EXPECT_NE(message_.find("is not finite"), std::string::npos) << message_;
}

// Every blob of the newest checkpoint in `dir`, by file name, as bytes.
std::map<std::string, std::string> checkpoint_blobs(const fs::path& dir) {
  std::map<std::string, std::string> blobs;
  const auto folder = latest_checkpoint(dir);
  EXPECT_TRUE(folder.has_value()) << dir;
  if (!folder) return blobs;
  for (const auto& entry : fs::directory_iterator(*folder)) {
    if (entry.path().extension() != ".bin") continue;
    std::ifstream in(entry.path(), std::ios::binary);
    blobs[entry.path().filename().string()] =
        std::string((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  }
  EXPECT_FALSE(blobs.empty()) << *folder;
  return blobs;
}

TEST_F(TrainerFailures, SkippedStepsMakeNoUpdateOnAnyRankAndAreCounted) {
  // lr 1e30: step 1 is finite and throws the parameters far out, every later step is NaN.
  // Skipping them must leave parameters and optimizer state exactly where step 1 put them:
  // the checkpoint after 6 steps holds the same bytes as the one after 1.
  const fs::path root =
      fs::temp_directory_path() / ("tessera-skip-test-" + std::to_string(::getpid()));
  fs::remove_all(root);
  auto o = options();
  o.schedule.base_lr = 1e30F;
  o.skip_nonfinite_steps = true;
  o.max_steps = 1;
  o.checkpoint_dir = root / "one";
  const auto one = run(o);
  ASSERT_EQ(training_errors_, 0) << message_;
  EXPECT_EQ(one.skipped_steps, 0);
  o.max_steps = 6;
  o.checkpoint_dir = root / "six";
  const auto six = run(o);
  ASSERT_EQ(training_errors_, 0) << message_;
  EXPECT_EQ(six.steps, 6);
  EXPECT_EQ(six.skipped_steps, 5);
  EXPECT_EQ(checkpoint_blobs(root / "six"), checkpoint_blobs(root / "one"));
  fs::remove_all(root);
}

TEST_F(TrainerFailures, MetricsOnAFullDeviceStopTheRunNamingTheFile) {
  auto o = options();
  o.metrics_file = "/dev/full";
  run(o, 1);
  EXPECT_EQ(training_errors_, 1);
  EXPECT_NE(message_.find("metrics_file /dev/full: cannot write the record of step 1: " +
                          std::string(std::strerror(ENOSPC))),
            std::string::npos)
      << message_;
}

// A 16 KiB tmpfs, so that writes really run out of space (and fsync and close see it too).
class FullFilesystem : public TrainerFailures {
 protected:
  void SetUp() override {
    TrainerFailures::SetUp();
    dir_ = fs::temp_directory_path() / ("tessera-full-" + std::to_string(::getpid()));
    fs::create_directories(dir_);
    if (::mount("tmpfs", dir_.c_str(), "tmpfs", 0, "size=16k") != 0) {
      const std::string why = std::strerror(errno);
      fs::remove(dir_);
      GTEST_SKIP() << "cannot mount a 16 KiB tmpfs at " << dir_ << " (" << why
                   << "; needs root): the full-filesystem case is not checked here";
    }
    mounted_ = true;
  }
  void TearDown() override {
    if (mounted_) ::umount2(dir_.c_str(), MNT_DETACH);
    std::error_code ignored;
    fs::remove_all(dir_, ignored);
  }
  // Fills the filesystem but for `leave` bytes (about: tmpfs counts pages).
  void fill() {
    std::ofstream filler(dir_ / "filler", std::ios::binary);
    const std::string block(1024, 'x');
    while (filler.write(block.data(), static_cast<std::streamsize>(block.size()))) filler.flush();
  }
  fs::path dir_;
  bool mounted_ = false;
};

TEST_F(FullFilesystem, MetricsOnAFullFilesystemStopTheRunNamingTheFile) {
  auto o = options();
  o.metrics_file = dir_ / "metrics.jsonl";
  fill();
  run(o, 1);
  EXPECT_EQ(training_errors_, 1);
  EXPECT_NE(message_.find("metrics_file " + o.metrics_file.string() + ": cannot "),
            std::string::npos)
      << message_;
  EXPECT_NE(message_.find(std::strerror(ENOSPC)), std::string::npos) << message_;
}

TEST_F(FullFilesystem, SummaryOnAFullFilesystemIsASummaryErrorNotACheckpointError) {
  fs::path summary = dir_ / "summary.json";
  { std::ofstream(summary) << "{\"earlier\": true}\n"; }
  fill();
  TrainResult result;
  result.losses.assign(1000, 0.5);
  result.ranks.resize(64);
  try {
    write_summary_json(summary, result);
    FAIL() << "a summary written to a full filesystem";
  } catch (const CheckpointError& e) {
    FAIL() << "reported as a checkpoint error: " << e.what();
  } catch (const Error& e) {
    const std::string what = e.what();
    EXPECT_EQ(what.rfind("--summary file: cannot write " + summary.string() +
                             ".tmp: " + std::strerror(ENOSPC),
                         0),
              0U)
        << what;
    EXPECT_EQ(what.find("checkpoint"), std::string::npos) << what;
  }
  // What was there is intact, and no temporary is left behind.
  std::ifstream in(summary);
  std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  EXPECT_EQ(text, "{\"earlier\": true}\n");
  EXPECT_FALSE(fs::exists(dir_ / "summary.json.tmp"));
}

}  // namespace
}  // namespace tessera
