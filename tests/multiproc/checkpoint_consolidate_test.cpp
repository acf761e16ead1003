// `tessera checkpoint consolidate` end to end with the real binary: a zero3 checkpoint written by
// two ranks becomes one world-size-1 checkpoint that a single-rank ddp run resumes from exactly
// as it resumes from the sharded original, and a bad source fails naming the culprit without
// leaving anything at the destination.
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

namespace {

namespace fs = std::filesystem;

class CheckpointConsolidate : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() /
           ("tessera-consolidate-" + std::to_string(::getpid()) + "-" +
            ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(dir_);
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }

  // The CLI's exit status (-1 if it did not exit normally); `timeout` keeps a hang from
  // stalling the suite. Output goes to out.txt for the failure messages.
  int cli(const std::string& arguments) const {
    const std::string command = "timeout 60 " + std::string(TESSERA_CLI_PATH) + " " + arguments +
                                " > " + (dir_ / "out.txt").string() + " 2>&1";
    const int status = std::system(command.c_str());
    return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  }

  // A small synthetic task with Adam, so the checkpoint carries optimizer state as well as
  // parameters; in-process ranks (transport local) keep it fast.
  int train(int ranks, const std::string& strategy, const std::string& extra) const {
    return cli("train -n " + std::to_string(ranks) +
               " --runtime.transport=local --runtime.timeout=30s --train.strategy=" + strategy +
               " --train.dataset=synthetic --dataset.synthetic.samples=256"
               " --dataset.synthetic.test_samples=64 --dataset.synthetic.features=16"
               " --dataset.synthetic.classes=4 --model.mlp.layers=16,24,4"
               " --train.optimizer=adam --train.batch_size=16 --train.epochs=1 --train.lr=0.01"
               " --train.progress=off --train.seed=3 " +
               extra);
  }

  // The zero3 checkpoint the tests consolidate: 2 ranks, 5 steps, a final checkpoint.
  fs::path sharded_root() const {
    const auto root = dir_ / "sharded";
    EXPECT_EQ(train(2, "zero3", "--train.max_steps=5 --train.checkpoint_dir=" + root.string()), 0)
        << output();
    return root;
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

  static std::string text_of(const fs::path& file) {
    std::ifstream in(file);
    return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
  }

  std::string output() const { return text_of(dir_ / "out.txt"); }

  // The folder root/latest names (the file holds its name and a newline).
  static fs::path latest_folder(const fs::path& root) {
    std::string name = text_of(root / "latest");
    while (!name.empty() && name.back() == '\n') name.pop_back();
    return root / name;
  }

  fs::path dir_;
};

TEST_F(CheckpointConsolidate, AZero3CheckpointBecomesOneASingleRankRunResumesFromIdentically) {
  const auto sharded = sharded_root();
  ASSERT_FALSE(HasFailure());
  const auto whole = dir_ / "whole";
  ASSERT_EQ(cli("checkpoint consolidate " + sharded.string() + " " + whole.string()), 0)
      << output();
  EXPECT_NE(output().find("world size 2"), std::string::npos) << output();

  // A checkpoint root of its own: `latest` names a step-5 checkpoint of world size 1 that
  // keeps the source's trainer metadata.
  ASSERT_TRUE(fs::exists(whole / "latest")) << output();
  const auto manifest = nlohmann::json::parse(text_of(latest_folder(whole) / "manifest"));
  EXPECT_EQ(manifest["step"], 5) << manifest;
  EXPECT_EQ(manifest["world_size"], 1) << manifest;
  EXPECT_EQ(manifest["metadata"]["seed"], "3") << manifest;
  EXPECT_EQ(manifest["metadata"]["consolidated_from_world_size"], "2") << manifest;
  // Every parameter whole: each slice blob takes dimension 0 and all its elements.
  for (const auto& blob : manifest["blobs"]) {
    if (!blob.contains("slice")) continue;
    const auto& slice = blob["slice"];
    EXPECT_EQ(slice["begin"], 0) << blob;
    EXPECT_EQ(slice["end"], slice["shape"][0]) << blob;
    EXPECT_EQ(slice["elements"][0], 0) << blob;
  }

  // inspect shows who wrote which slice of the sharded one, and checks both cover everything.
  ASSERT_EQ(cli("checkpoint inspect " + sharded.string()), 0) << output();
  EXPECT_NE(output().find("format 2, step 5, written by 2 rank(s) of strategy zero3"),
            std::string::npos)
      << output();
  EXPECT_NE(output().find("    rank 1  optimizer slot 1  dim 0 ["), std::string::npos) << output();
  EXPECT_NE(output().find("every parameter and optimizer slot is covered exactly once"),
            std::string::npos)
      << output();
  ASSERT_EQ(cli("checkpoint inspect " + whole.string()), 0) << output();
  EXPECT_NE(output().find("written by 1 rank(s)"), std::string::npos) << output();

  // The sharded original loads into ddp at world size 1 too (resharding on load); both resumed
  // runs must then see the same parameters and Adam state, so take bitwise the same steps.
  const std::string more = "--resume --train.max_steps=9 --summary=";
  ASSERT_EQ(train(1, "ddp",
                  more + (dir_ / "from_whole.json").string() +
                      " --train.checkpoint_dir=" + whole.string() +
                      " --train.metrics_file=" + (dir_ / "from_whole.jsonl").string()),
            0)
      << output();
  ASSERT_EQ(train(1, "ddp",
                  more + (dir_ / "from_sharded.json").string() +
                      " --train.checkpoint_dir=" + sharded.string() +
                      " --train.metrics_file=" + (dir_ / "from_sharded.jsonl").string()),
            0)
      << output();
  EXPECT_NE(text_of(dir_ / "from_whole.json").find("\"resumed_from_step\": 5"), std::string::npos)
      << text_of(dir_ / "from_whole.json");
  const auto resumed = losses(dir_ / "from_whole.jsonl");
  EXPECT_EQ(resumed.size(), 4U);
  EXPECT_EQ(resumed, losses(dir_ / "from_sharded.jsonl"));
}

TEST_F(CheckpointConsolidate, AMissingSourceFailsNamingItAndCreatesNoDestination) {
  const auto missing = dir_ / "no-such-checkpoint";
  const auto whole = dir_ / "whole";
  EXPECT_NE(cli("checkpoint consolidate " + missing.string() + " " + whole.string()), 0);
  EXPECT_NE(output().find(missing.string() + " does not exist"), std::string::npos) << output();
  EXPECT_FALSE(fs::exists(whole));
}

TEST_F(CheckpointConsolidate, ATruncatedBlobFailsNamingItsFileAndCreatesNoDestination) {
  const auto sharded = sharded_root();
  ASSERT_FALSE(HasFailure());
  const auto folder = latest_folder(sharded);
  // The largest blob: a parameter shard, so the damage is where the data is.
  fs::path victim;
  for (const auto& entry : fs::directory_iterator(folder)) {
    if (entry.path().filename() == "manifest") continue;
    if (victim.empty() || entry.file_size() > fs::file_size(victim)) victim = entry.path();
  }
  ASSERT_FALSE(victim.empty());
  fs::resize_file(victim, fs::file_size(victim) / 2);

  const auto whole = dir_ / "whole";
  EXPECT_NE(cli("checkpoint consolidate " + sharded.string() + " " + whole.string()), 0);
  EXPECT_NE(output().find(victim.filename().string()), std::string::npos) << output();
  EXPECT_NE(output().find("truncated"), std::string::npos) << output();
  EXPECT_FALSE(fs::exists(whole));
}

TEST_F(CheckpointConsolidate, ASecondConsolidationIntoTheSameRootIsRefusedAndChangesNothing) {
  const auto sharded = sharded_root();
  ASSERT_FALSE(HasFailure());
  fs::remove(sharded / "latest");  // the newest checkpoint is found without it
  const auto whole = dir_ / "whole";
  ASSERT_EQ(cli("checkpoint consolidate " + sharded.string() + " " + whole.string()), 0)
      << output();
  const auto manifest = text_of(whole / "step-000000000005" / "manifest");
  EXPECT_NE(cli("checkpoint consolidate " + sharded.string() + " " + whole.string()), 0);
  EXPECT_NE(output().find("already holds step-000000000005"), std::string::npos) << output();
  EXPECT_EQ(text_of(whole / "step-000000000005" / "manifest"), manifest);
}

}  // namespace
