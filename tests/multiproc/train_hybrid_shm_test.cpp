// `tessera train` with the hybrid strategy over shm worker processes: a tensor x pipeline mesh
// follows the one-process ddp loss curve to 1e-5, a pipeline x data mesh gives ddp's losses
// bit for bit at the same data-parallel size, and a world the mesh does not divide is refused.
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

namespace {

namespace fs = std::filesystem;

class HybridOverShm : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() /
           ("tessera-hybrid-shm-" + std::to_string(::getpid()) + "-" +
            ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(dir_);
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }

  // tessera train on a small synthetic task with two Linear pairs; writes metrics to `name`.
  int train(const std::string& name, const std::string& extra) const {
    const std::string command =
        "timeout 120 " + std::string(TESSERA_CLI_PATH) +
        " train --runtime.timeout=30s --train.dataset=synthetic"
        " --dataset.synthetic.samples=640 --dataset.synthetic.test_samples=100"
        " --dataset.synthetic.features=16 --dataset.synthetic.classes=8"
        " --model.mlp.layers=16,32,24,32,8 --train.optimizer=adam --train.max_grad_norm=0.5"
        " --train.batch_size=16 --train.epochs=1 --train.lr=0.001 --train.progress=off"
        " --train.seed=3 --train.micro_batches=4 --train.metrics_file=" +
        (dir_ / name).string() + " " + extra + " > " + (dir_ / "out.txt").string() + " 2>&1";
    return std::system(command.c_str());
  }

  // The "loss" field of every step line of a metrics file, as text (shortest round trip).
  std::vector<std::string> losses(const std::string& name) const {
    std::vector<std::string> values;
    std::ifstream in(dir_ / name);
    for (std::string line; std::getline(in, line);) {
      const auto at = line.find("\"loss\":");
      if (at == std::string::npos || line.find("\"step\"") == std::string::npos) continue;
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

TEST_F(HybridOverShm, TensorTimesPipelineFollowsOneProcessDdp) {
  ASSERT_EQ(train("ddp.jsonl", "-n 1 --runtime.transport=local --train.strategy=ddp"), 0)
      << output();
  ASSERT_EQ(train("hybrid.jsonl",
                  "-n 4 --runtime.transport=shm --train.strategy=hybrid"
                  " --strategy.hybrid.tensor_parallel=2 --strategy.hybrid.pipeline_parallel=2"),
            0)
      << output();
  const auto ddp = losses("ddp.jsonl");
  const auto hybrid = losses("hybrid.jsonl");
  ASSERT_EQ(ddp.size(), 40U);  // 640 samples / 16
  ASSERT_EQ(hybrid.size(), ddp.size());
  for (std::size_t s = 0; s < ddp.size(); ++s) {
    const double want = std::stod(ddp[s]);
    EXPECT_LT(std::fabs(std::stod(hybrid[s]) - want), 1e-5 * std::fabs(want)) << "step " << s + 1;
  }
  EXPECT_NE(output().find("hybrid: pipeline bubble over 40 steps: measured"), std::string::npos)
      << output();
}

TEST_F(HybridOverShm, PipelineTimesDataGivesDdpsBitsAtTheSameDataParallelSize) {
  ASSERT_EQ(train("ddp.jsonl", "-n 2 --runtime.transport=shm --train.strategy=ddp"), 0) << output();
  ASSERT_EQ(train("hybrid.jsonl",
                  "-n 4 --runtime.transport=shm --train.strategy=hybrid"
                  " --strategy.hybrid.pipeline_parallel=2 --strategy.hybrid.schedule=gpipe"),
            0)
      << output();
  ASSERT_EQ(losses("ddp.jsonl").size(), 20U);  // 640 / (2 x 16)
  EXPECT_EQ(losses("hybrid.jsonl"), losses("ddp.jsonl"));
}

TEST_F(HybridOverShm, ACheckpointConsolidatedToOneRankResumesInDdpAsUninterrupted) {
  ASSERT_EQ(train("ddp.jsonl", "-n 1 --runtime.transport=local --train.strategy=ddp"), 0)
      << output();
  const std::string sharded = (dir_ / "sharded").string();
  ASSERT_EQ(train("first.jsonl",
                  "-n 4 --runtime.transport=shm --train.strategy=hybrid"
                  " --strategy.hybrid.tensor_parallel=2 --strategy.hybrid.pipeline_parallel=2"
                  " --train.max_steps=20 --train.checkpoint_dir=" +
                      sharded),
            0)
      << output();
  const std::string whole = (dir_ / "whole").string();
  const std::string consolidate = "timeout 60 " + std::string(TESSERA_CLI_PATH) +
                                  " checkpoint consolidate " + sharded + " " + whole + " > " +
                                  (dir_ / "out.txt").string() + " 2>&1";
  ASSERT_EQ(std::system(consolidate.c_str()), 0) << output();
  ASSERT_EQ(train("resumed.jsonl",
                  "-n 1 --runtime.transport=local --train.strategy=ddp --resume"
                  " --train.checkpoint_dir=" +
                      whole),
            0)
      << output();
  const auto ddp = losses("ddp.jsonl");
  const auto resumed = losses("resumed.jsonl");
  ASSERT_EQ(ddp.size(), 40U);
  ASSERT_EQ(resumed.size(), 20U);
  for (std::size_t s = 0; s < resumed.size(); ++s) {
    const double want = std::stod(ddp[20 + s]);
    EXPECT_LT(std::fabs(std::stod(resumed[s]) - want), 1e-5 * std::fabs(want)) << "step " << 21 + s;
  }
}

TEST_F(HybridOverShm, AWorldTheMeshDoesNotDivideIsRefusedBeforeAnyRankStarts) {
  const int status = train("bad.jsonl",
                           "-n 3 --runtime.transport=shm --train.strategy=hybrid"
                           " --strategy.hybrid.pipeline_parallel=2");
  ASSERT_TRUE(WIFEXITED(status)) << output();
  EXPECT_EQ(WEXITSTATUS(status), 2) << output();  // a configuration error
  const auto out = output();
  EXPECT_NE(out.find("flag --strategy.hybrid.pipeline_parallel: "), std::string::npos) << out;
  EXPECT_NE(out.find("pipeline_parallel = 2 need a world size that is a multiple of 2"),
            std::string::npos)
      << out;
  EXPECT_NE(out.find("[runtime] world_size = 3 (flag --runtime.world_size)"), std::string::npos)
      << out;
  EXPECT_EQ(out.find("[rank "), std::string::npos) << "a rank was started:\n" << out;
}

TEST_F(HybridOverShm, ConfigCheckCountsStepsOverTheDataParallelReplicasOnly) {
  // 640 samples, batch 16: tp2 x pp2 of 4 ranks is one replica, 40 steps (not 10).
  const auto config = dir_ / "run.ini";
  std::ofstream(config) << "[train]\nstrategy = hybrid\n";
  const std::string command = std::string(TESSERA_CLI_PATH) + " config check " + config.string() +
                              " --runtime.transport=shm --train.dataset=synthetic"
                              " --dataset.synthetic.samples=640 --model.mlp.layers=16,32,24,32,8"
                              " --dataset.synthetic.features=16 --dataset.synthetic.classes=8"
                              " --train.batch_size=16 --train.epochs=1 --runtime.world_size=4"
                              " --strategy.hybrid.tensor_parallel=2"
                              " --strategy.hybrid.pipeline_parallel=2 > " +
                              (dir_ / "out.txt").string() + " 2>&1";
  ASSERT_EQ(std::system(command.c_str()), 0) << output();
  EXPECT_NE(
      output().find("4 rank(s), as 1 data-parallel replica(s), 640 training samples, 40 steps "
                    "per epoch"),
      std::string::npos)
      << output();
}

}  // namespace
