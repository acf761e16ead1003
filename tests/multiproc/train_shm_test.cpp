// `tessera train` end to end over the shm transport: two launched worker processes, a
// summary from rank 0, a resumed run whose per-step losses equal the uninterrupted one's, and
// --trace: each worker's trace, merged by `tessera trace merge`, and a bad path refused.
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <set>
#include <sstream>
#include <string>
#include <vector>

namespace {

namespace fs = std::filesystem;

class TrainOverShm : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() /
           ("tessera-train-shm-" + std::to_string(::getpid()) + "-" +
            ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(dir_);
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }

  // Runs tessera train on a small synthetic task; `timeout` guarantees it cannot hang the suite.
  int train(const std::string& extra) const {
    const std::string command =
        "timeout 120 " + std::string(TESSERA_CLI_PATH) +
        " train -n 2 --runtime.transport=shm --runtime.timeout=30s --train.dataset=synthetic"
        " --dataset.synthetic.samples=600 --dataset.synthetic.test_samples=200"
        " --dataset.synthetic.features=32 --dataset.synthetic.classes=4"
        " --model.mlp.layers=32,64,4 --train.optimizer=sgd --optimizer.sgd.momentum=0.9"
        " --train.batch_size=16 --train.epochs=2 --train.lr=0.05 --train.progress=off"
        " --train.seed=5 " +
        extra + " > " + (dir_ / "out.txt").string() + " 2>&1";
    return std::system(command.c_str());
  }

  // The "loss" field of every step line of a metrics file, as text (shortest round trip, so
  // equal text means equal bits).
  static std::vector<std::string> losses(const fs::path& metrics) {
    std::vector<std::string> values;
    std::ifstream in(metrics);
    for (std::string line; std::getline(in, line);) {
      const auto at = line.find("\"loss\":");
      if (at == std::string::npos) continue;
      values.push_back(line.substr(at + 7, line.find(',', at) - at - 7));
    }
    return values;
  }

  std::string output() const {
    std::ifstream in(dir_ / "out.txt");
    return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
  }

  fs::path dir_;
};

TEST_F(TrainOverShm, TwoWorkersTrainAndRank0WritesTheSummary) {
  const auto summary = dir_ / "summary.json";
  ASSERT_EQ(train("--summary=" + summary.string()), 0) << output();
  std::ifstream in(summary);
  const std::string text{std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
  EXPECT_NE(text.find("\"steps\": 38"), std::string::npos) << text;  // 2 x ceil(600 / 32)
  EXPECT_NE(text.find("\"rank\": 1"), std::string::npos) << text;
  EXPECT_NE(text.find("\"peak_rss_bytes\""), std::string::npos) << text;
  EXPECT_NE(output().find("test accuracy"), std::string::npos) << output();
}

TEST_F(TrainOverShm, AResumedRunContinuesWithBitwiseTheSameLosses) {
  ASSERT_EQ(train("--train.metrics_file=" + (dir_ / "whole.jsonl").string()), 0) << output();
  const std::string checkpoints = " --train.checkpoint_dir=" + (dir_ / "ckpt").string();
  ASSERT_EQ(train("--train.max_steps=13 --train.checkpoint_every=13" + checkpoints +
                  " --train.metrics_file=" + (dir_ / "resumed.jsonl").string()),
            0)
      << output();
  ASSERT_EQ(train("--resume" + checkpoints +
                  " --train.metrics_file=" + (dir_ / "resumed.jsonl").string()),
            0)
      << output();
  const auto whole = losses(dir_ / "whole.jsonl");
  ASSERT_EQ(whole.size(), 38U);
  EXPECT_EQ(losses(dir_ / "resumed.jsonl"), whole);
}

TEST_F(TrainOverShm, EachWorkerWritesItsTraceAndTheMergeHoldsBoth) {
  const auto trace = dir_ / "run.json";
  ASSERT_EQ(train("--train.max_steps=4 --trace " + trace.string() + " --trace-steps 2:3"), 0)
      << output();
  std::vector<fs::path> files;
  for (int rank = 0; rank < 2; ++rank) {
    const auto file = dir_ / ("run.rank" + std::to_string(rank) + ".json");
    ASSERT_TRUE(fs::exists(file)) << file << "\n" << output();
    std::ifstream in(file);
    const auto json = nlohmann::json::parse(in);
    EXPECT_EQ(json.at("otherData").at("status"), "complete");
    std::set<int> pids;
    std::set<int> steps;
    std::size_t forwards = 0;
    std::size_t all_reduces = 0;
    for (const auto& e : json.at("traceEvents")) {
      pids.insert(e.at("pid").get<int>());
      if (e.value("name", "") == "step") steps.insert(e.at("args").at("step").get<int>());
      if (e.value("name", "") == "forward") ++forwards;
      if (e.value("name", "") == "all_reduce" && e.at("ph") == "b") ++all_reduces;
    }
    EXPECT_EQ(pids, std::set<int>{rank});
    EXPECT_EQ(steps, (std::set<int>{2, 3}));
    EXPECT_GT(forwards, 0U);
    EXPECT_GT(all_reduces, 0U);
    files.push_back(file);
  }
  const auto merged = dir_ / "merged.json";
  const std::string merge = std::string(TESSERA_CLI_PATH) + " trace merge -o " + merged.string() +
                            " " + files[0].string() + " " + files[1].string() + " > " +
                            (dir_ / "out.txt").string() + " 2>&1";
  ASSERT_EQ(std::system(merge.c_str()), 0) << output();
  std::ifstream in(merged);
  const auto joined = nlohmann::json::parse(in);
  std::set<int> pids;
  for (const auto& e : joined.at("traceEvents")) pids.insert(e.at("pid").get<int>());
  EXPECT_EQ(pids, (std::set<int>{0, 1}));
}

TEST_F(TrainOverShm, AnUnwritableTracePathFailsBeforeTrainingWithExitCode2) {
  const auto trace = dir_ / "no-such-folder" / "run.json";
  const int status = train("--trace " + trace.string());
  ASSERT_TRUE(WIFEXITED(status));
  EXPECT_EQ(WEXITSTATUS(status), 2) << output();
  EXPECT_NE(output().find("--trace"), std::string::npos) << output();
  EXPECT_NE(output().find(trace.string()), std::string::npos) << output();
  EXPECT_EQ(output().find("test accuracy"), std::string::npos) << output();
}

}  // namespace
