// The trainer over two local ranks: resuming reproduces the uninterrupted run bit for bit,
// and a damaged checkpoint is refused before anything trains.
#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <functional>
#include <mutex>
#include <nlohmann/json.hpp>
#include <sstream>
#include <tuple>

#include "checkpoint_test_support.hpp"
#include "ddp_strategy.hpp"
#include "ddp_test_support.hpp"
#include "mlp/mlp_model.hpp"
#include "sgd/sgd.hpp"
#include "synthetic/synthetic.hpp"
#include "tessera/base/error.hpp"
#include "tessera/runtime/checkpoint.hpp"
#include "tessera/runtime/trainer.hpp"
#include "trainer_test_support.hpp"

namespace tessera {
namespace {

namespace fs = std::filesystem;
using testing::forge_manifest;
using testing::replaced;

// The synthetic data set, recording every training sample any rank gathers.
class RecordingDataset final : public testing::RecordingDatasetBase {
 public:
  using RecordingDatasetBase::RecordingDatasetBase;
  // Each training sample's count, then the record is cleared.
  std::vector<int> take_counts() const {
    const std::lock_guard<std::mutex> lock(mutex_);
    std::vector<int> counts(size(Split::train), 0);
    for (const auto i : seen_) ++counts.at(i);
    seen_.clear();
    return counts;
  }

 private:
  void record(std::span<const std::size_t> indices) const override {
    const std::lock_guard<std::mutex> lock(mutex_);
    seen_.insert(seen_.end(), indices.begin(), indices.end());
  }
  mutable std::mutex mutex_;
  mutable std::vector<std::size_t> seen_;
};

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

  // Rank 0's result of a run (two ranks unless said otherwise).
  TrainResult run(const TrainerOptions& o, bool resume, int ranks = 2,
                  std::shared_ptr<const Dataset> data = nullptr) {
    TrainResult result;
    testing::run_ranks(ranks, [&](std::shared_ptr<Communicator> world) {
      TrainerComponents parts{
          world,
          model_,
          std::make_shared<sgd::SgdOptimizer>(sgd::SgdConfig{0.9F, 0.0F, 1e-4F, true}),
          data ? data : data_,
          std::make_shared<ddp::DdpStrategy>(ddp::DdpConfig{}),
          "ddp",
          {"ddp", "zero1", "zero2", "zero3"}};
      Trainer trainer(o, parts);
      auto r = trainer.run(resume);
      if (world->rank() == 0) result = std::move(r);
    });
    return result;
  }

  struct Resumed {
    std::vector<int> counts;  // uses of each training sample over both runs
    std::int64_t steps = 0;
  };
  // One epoch: 5 steps at two ranks (160 samples), then the rest resumed at `ranks`; `edit`
  // may rewrite the checkpoint in between.
  Resumed resume_at(int ranks, const std::function<void(const fs::path&)>& edit = {}) {
    const auto recording = std::make_shared<RecordingDataset>(data_);
    auto o = options();
    o.epochs = 1;
    o.checkpoint_dir = root_;
    o.max_steps = 5;
    EXPECT_EQ(run(o, false, 2, recording).steps, 5);
    if (edit) edit(root_ / "step-000000000005");
    o.max_steps = 0;
    const auto resumed = run(o, true, ranks, recording);
    EXPECT_EQ(resumed.resumed_from_step, 5);
    return {recording->take_counts(), resumed.steps};
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

TEST_F(TrainerRuns, AResumeWithoutLatestContinuesFromTheNewestCheckpoint) {
  // Before: no `latest`, so a silent start at step 0 that overwrote and pruned the checkpoints.
  const auto whole = run(options(), false);
  auto first = options();
  first.checkpoint_dir = root_;
  first.checkpoint_every = 5;
  first.max_steps = 13;
  run(first, false);
  fs::remove(root_ / "latest");
  auto second = options();
  second.checkpoint_dir = root_;
  const auto resumed = run(second, true);
  EXPECT_EQ(resumed.resumed_from_step, 13);
  EXPECT_EQ(resumed.losses, std::vector<double>(whole.losses.begin() + 13, whole.losses.end()));
}

TEST_F(TrainerRuns, AResumedRunPrunesOnlyTheCheckpointsItWrote) {
  auto first = options();
  first.checkpoint_dir = root_;
  first.checkpoint_every = 4;
  first.max_steps = 8;  // writes steps 4 and 8
  run(first, false);
  auto second = options();
  second.checkpoint_dir = root_;
  second.checkpoint_every = 4;
  second.checkpoint_keep = 1;  // writes 12 ... 32, keeps the newest of its own
  run(second, true);
  std::vector<std::string> left;
  for (const auto& folder : list_checkpoints(root_)) left.push_back(folder.filename().string());
  EXPECT_EQ(left, (std::vector<std::string>{"step-000000000004", "step-000000000008",
                                            "step-000000000032"}));
}

TEST_F(TrainerRuns, ARunWithoutResumeRefusesAFolderThatHoldsCheckpoints) {
  auto first = options();
  first.checkpoint_dir = root_;
  first.max_steps = 3;
  run(first, false);
  const auto before = testing::read_text(root_ / "step-000000000003" / "manifest");
  try {
    run(first, false);
    FAIL() << "a fresh run overwrote the checkpoints of an earlier one";
  } catch (const CheckpointError& e) {
    const std::string message = e.what();
    EXPECT_NE(message.find("--resume"), std::string::npos) << message;
    EXPECT_NE(message.find("step-000000000003"), std::string::npos) << message;
  }
  EXPECT_EQ(testing::read_text(root_ / "step-000000000003" / "manifest"), before);
}

// A fresh run's records once followed an earlier run's in the same metrics_file, the two
// indistinguishable; --resume still appends, and an empty file is no earlier run.
TEST_F(TrainerRuns, ARunWithoutResumeRefusesAMetricsFileThatHoldsRecordsAndAResumeAppends) {
  auto o = options();
  o.checkpoint_dir = root_ / "checkpoints";
  o.metrics_file = root_ / "metrics.jsonl";
  o.max_steps = 3;
  run(o, false);
  const auto first = testing::read_text(o.metrics_file);
  ASSERT_FALSE(first.empty());
  fs::remove_all(o.checkpoint_dir);  // so that only the metrics file stands in the way
  try {
    run(o, false);
    FAIL() << "a fresh run appended to the records of an earlier one";
  } catch (const ConfigError& e) {
    const std::string message = e.what();
    EXPECT_NE(message.find("[train] metrics_file " + o.metrics_file.string() + " already holds " +
                           std::to_string(first.size()) + " bytes"),
              std::string::npos)
        << message;
    EXPECT_NE(message.find("pass --resume"), std::string::npos) << message;
  }
  EXPECT_EQ(testing::read_text(o.metrics_file), first);

  o.max_steps = 5;
  run(o, true);
  const auto appended = testing::read_text(o.metrics_file);
  EXPECT_EQ(appended.substr(0, first.size()), first);
  EXPECT_GT(appended.size(), first.size());

  fs::remove_all(o.checkpoint_dir);
  std::ofstream(o.metrics_file, std::ios::trunc).close();
  EXPECT_EQ(run(o, false).steps, 5);
}

// Steps trained again (a resume from a checkpoint older than the last step, as after a recovery)
// once appeared twice in metrics_file, their samples counted twice: the second record of a step
// says it is redone, and replaces the first.
TEST_F(TrainerRuns, AStepTrainedAgainIsMarkedRedoneInTheMetricsFile) {
  auto o = options();
  o.checkpoint_dir = root_ / "checkpoints";
  o.checkpoint_every = 5;
  o.metrics_file = root_ / "metrics.jsonl";
  o.max_steps = 7;
  run(o, false);
  // The run's last checkpoint lost: the resume goes on from step 5 and trains 6 and 7 again.
  fs::remove_all(o.checkpoint_dir / "step-000000000007");
  o.max_steps = 9;
  EXPECT_EQ(run(o, true).resumed_from_step, 5);

  std::vector<std::pair<std::int64_t, bool>> steps;  // (step, redone) of each step record
  std::istringstream lines(testing::read_text(o.metrics_file));
  for (std::string line; std::getline(lines, line);) {
    const auto record = nlohmann::json::parse(line);
    if (!record.contains("loss")) continue;  // an evaluation
    steps.emplace_back(record["step"].get<std::int64_t>(), record.value("redone", false));
  }
  const std::vector<std::pair<std::int64_t, bool>> expected{
      {1, false}, {2, false}, {3, false}, {4, false}, {5, false}, {6, false},
      {7, false}, {6, true},  {7, true},  {8, false}, {9, false}};
  EXPECT_EQ(steps, expected);
}

// The steps of each evaluation record in `metrics_file`, in file order.
std::vector<std::int64_t> evaluated_steps(const fs::path& metrics_file) {
  std::vector<std::int64_t> steps;
  std::istringstream lines(testing::read_text(metrics_file));
  for (std::string line; std::getline(lines, line);) {
    const auto record = nlohmann::json::parse(line);
    if (record.contains("test_accuracy")) steps.push_back(record["step"].get<std::int64_t>());
  }
  return steps;
}

// The checkpoint at an epoch's end is written before the epoch's evaluation. A job stopped
// during that evaluation (here: its record taken out of the metrics file, as such a stop leaves
// it) once resumed past it, and the epoch had no evaluation; a job stopped after it must not
// evaluate it twice.
TEST_F(TrainerRuns, AResumeFromAnEpochsEndMakesThatEpochsEvaluationUnlessItWasRecorded) {
  auto o = options();  // 2 epochs of 16 steps (500 samples, 2 ranks of 16)
  o.checkpoint_dir = root_ / "checkpoints";
  o.metrics_file = root_ / "metrics.jsonl";
  o.max_steps = 16;
  run(o, false);
  ASSERT_EQ(evaluated_steps(o.metrics_file), std::vector<std::int64_t>{16});
  const auto with_evaluation = testing::read_text(o.metrics_file);
  std::string without_evaluation;
  std::istringstream lines(with_evaluation);
  for (std::string line; std::getline(lines, line);) {
    if (line.find("test_accuracy") == std::string::npos) without_evaluation += line + "\n";
  }
  o.max_steps = 0;

  // Stopped during the evaluation: the resumed run makes it first.
  std::ofstream(o.metrics_file, std::ios::trunc) << without_evaluation;
  const auto stopped_during = run(o, true);
  EXPECT_EQ(stopped_during.resumed_from_step, 16);
  EXPECT_EQ(evaluated_steps(o.metrics_file), (std::vector<std::int64_t>{16, 32}));

  // Stopped after it: nothing evaluated twice.
  fs::remove_all(o.checkpoint_dir / "step-000000000032");
  std::ofstream(o.metrics_file, std::ios::trunc) << with_evaluation;
  EXPECT_EQ(run(o, true).resumed_from_step, 16);
  EXPECT_EQ(evaluated_steps(o.metrics_file), (std::vector<std::int64_t>{16, 32}));
}

TEST_F(TrainerRuns, AResumeAtAnotherWorldSizeTrainsOnEverySampleOfTheEpochOnce) {
  // Before: the position was a batch index, so 2 -> 3 skipped samples and 2 -> 1 repeated them.
  for (const int ranks : {3, 1}) {
    const auto result = resume_at(ranks);
    EXPECT_EQ(result.counts, std::vector<int>(500, 1)) << "resumed at " << ranks << " ranks";
    // 5 steps of 32, then 340 samples at 16 per rank: 8 steps at 3 ranks, 22 at 1.
    EXPECT_EQ(result.steps, ranks == 3 ? 13 : 27);
    fs::remove_all(root_);
  }
}

TEST_F(TrainerRuns, ACheckpointThatKeptABatchIndexResumesAtItsWritersWorldSize) {
  // Checkpoints written before epoch_samples_done: "batch 5" at two ranks of 16 is sample 160.
  const auto result = resume_at(3, [](const fs::path& folder) {
    forge_manifest(folder, [](testing::Json& m) {
      m["metadata"].erase("epoch_samples_done");
      m["metadata"]["batch"] = "5";
    });
  });
  EXPECT_EQ(result.counts, std::vector<int>(500, 1));
}

TEST_F(TrainerRuns, APositionThatDoesNotAddUpIsRefusedBeforeLoading) {
  // (metadata key, its new value, what the refusal says); "batch" replaces epoch_samples_done.
  const std::vector<std::tuple<std::string, std::string, std::string>> cases = {
      {"epoch_samples_done", "500", "training split has 500"},
      {"epoch_samples_done", "-3", "not a whole number"},
      {"batch", "16", "training split has 500"},
      {"epoch", "9", "epoch 10 after only 5 steps"},
      {"epoch", "x", "'epoch' is 'x'"},
      {"strategy", "bogus", "strategy 'bogus'"},
      {"strategy", "zero2", "names strategy 'zero2', its parameter index 'ddp'"},
      {"seed", "12", "seed 12"},
  };
  auto first = options();
  first.checkpoint_dir = root_;
  first.epochs = 1;
  first.max_steps = 5;
  run(first, false);
  const auto folder = root_ / "step-000000000005";
  const auto original = testing::read_text(folder / "manifest");
  for (const auto& [key, value, expected] : cases) {
    std::ofstream(folder / "manifest", std::ios::binary | std::ios::trunc) << original;
    forge_manifest(folder, [&](testing::Json& m) {
      EXPECT_TRUE(m["metadata"].contains(key) || key == "batch") << key;
      if (key == "batch") m["metadata"].erase("epoch_samples_done");
      m["metadata"][key] = value;
    });
    const auto to = key + " " + value;
    auto second = first;
    second.max_steps = 0;
    try {
      run(second, true);
      ADD_FAILURE() << "resumed from a checkpoint with '" << to << "'";
    } catch (const CheckpointError& e) {
      EXPECT_NE(std::string(e.what()).find(expected), std::string::npos)
          << "'" << to << "': " << e.what();
    }
  }
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
