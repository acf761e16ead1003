// `tessera train` end to end over the shm transport: two launched worker processes, a
// summary from rank 0, and a resumed run whose per-step losses equal the uninterrupted one's.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
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

}  // namespace
