// `tessera train` with the hybrid strategy over shm worker processes: every mesh of tp, pp,
// dp in {1, 2} follows the one-process ddp loss curve to 1e-5, a pipeline x data mesh gives ddp's
// losses bit for bit at the same data-parallel size, a world the mesh does not divide is refused,
// and `tessera trace timeline` draws each stage's GPipe and 1F1B order from the run's traces.
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cctype>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
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
  // `batch`: rows per data-parallel replica.
  int train(const std::string& name, const std::string& extra, int batch = 16) const {
    const std::string command =
        "timeout 120 " + std::string(TESSERA_CLI_PATH) +
        " train --runtime.timeout=30s --train.dataset=synthetic"
        " --dataset.synthetic.samples=640 --dataset.synthetic.test_samples=100"
        " --dataset.synthetic.features=16 --dataset.synthetic.classes=8"
        " --model.mlp.layers=16,32,24,32,8 --train.optimizer=adam --train.max_grad_norm=0.5"
        " --train.batch_size=" +
        std::to_string(batch) +
        " --train.epochs=1 --train.lr=0.001 --train.progress=off"
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

  // `tessera ARGS`, its output in out.txt; returns the exit status.
  int cli(const std::string& args) const {
    const std::string command = "timeout 60 " + std::string(TESSERA_CLI_PATH) + " " + args + " > " +
                                (dir_ / "out.txt").string() + " 2>&1";
    const int status = std::system(command.c_str());
    return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
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
  EXPECT_NE(
      output().find(
          "hybrid: pipeline bubble over 39 steps (the first, untimed, not counted): measured"),
      std::string::npos)
      << output();
}

TEST_F(HybridOverShm, EveryMeshOfSizesOneAndTwoFollowsOneProcessDdp) {
  // The same global batch of 16 rows everywhere: each of dp replicas takes 16 / dp of them.
  ASSERT_EQ(train("ddp.jsonl", "-n 1 --runtime.transport=local --train.strategy=ddp"), 0)
      << output();
  const auto ddp = losses("ddp.jsonl");
  ASSERT_EQ(ddp.size(), 40U);  // 640 samples / 16
  for (const int tp : {1, 2}) {
    for (const int pp : {1, 2}) {
      for (const int dp : {1, 2}) {
        const std::string mesh =
            "tp" + std::to_string(tp) + "_pp" + std::to_string(pp) + "_dp" + std::to_string(dp);
        ASSERT_EQ(train(mesh + ".jsonl",
                        "-n " + std::to_string(tp * pp * dp) +
                            " --runtime.transport=shm --train.strategy=hybrid"
                            " --strategy.hybrid.tensor_parallel=" +
                            std::to_string(tp) +
                            " --strategy.hybrid.pipeline_parallel=" + std::to_string(pp),
                        16 / dp),
                  0)
            << mesh << "\n"
            << output();
        const auto hybrid = losses(mesh + ".jsonl");
        ASSERT_EQ(hybrid.size(), ddp.size()) << mesh;
        for (std::size_t s = 0; s < ddp.size(); ++s) {
          const double want = std::stod(ddp[s]);
          EXPECT_LT(std::fabs(std::stod(hybrid[s]) - want), 1e-5 * std::fabs(want))
              << mesh << " step " << s + 1;
        }
      }
    }
  }
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

// The passes ("F0", "B3") of each row of a drawn timeline, left to right, by row label (rows
// of a wide drawing are long: scanned by hand, not by std::regex, which recurses per char).
std::vector<std::pair<std::string, std::vector<std::string>>> drawn_passes(
    const std::string& text) {
  std::vector<std::pair<std::string, std::vector<std::string>>> rows;
  std::istringstream lines(text);
  for (std::string line; std::getline(lines, line);) {
    const auto cells = line.find("  ");
    if (!line.starts_with("rank ") || cells == std::string::npos) continue;
    std::vector<std::string> passes;
    for (std::size_t i = cells; i < line.size(); ++i) {
      if (line[i] != 'F' && line[i] != 'B') continue;
      std::size_t digits = i + 1;
      while (digits < line.size() && std::isdigit(static_cast<unsigned char>(line[digits]))) {
        ++digits;
      }
      if (digits > i + 1) passes.push_back(line.substr(i, digits - i));
      i = digits - 1;
    }
    rows.emplace_back(line.substr(0, cells), std::move(passes));
  }
  return rows;
}

TEST_F(HybridOverShm, TheTimelineDrawsEachStagesGPipeAndOneFOneBOrderFromTheTraces) {
  using Rows = std::vector<std::pair<std::string, std::vector<std::string>>>;
  const std::vector<std::string> gpipe{"F0", "F1", "F2", "F3", "B0", "B1", "B2", "B3"};
  const Rows want_gpipe{{"rank 0 stage 0", gpipe}, {"rank 1 stage 1", gpipe}};
  const Rows want_1f1b{{"rank 0 stage 0", {"F0", "F1", "B0", "F2", "B1", "F3", "B2", "B3"}},
                       {"rank 1 stage 1", {"F0", "B0", "F1", "B1", "F2", "B2", "F3", "B3"}}};
  for (const std::string schedule : {"gpipe", "1f1b"}) {
    const auto trace = dir_ / (schedule + ".json");
    ASSERT_EQ(train(schedule + ".jsonl",
                    "-n 2 --runtime.transport=shm --train.strategy=hybrid"
                    " --strategy.hybrid.pipeline_parallel=2 --strategy.hybrid.schedule=" +
                        schedule + " --train.max_steps=4 --trace " + trace.string() +
                        " --trace-steps 2:3"),
              0)
        << output();
    // Columns of 0.1 us for a step of 20 ms (this small model's step takes 0.1 ms on a quiet
    // machine, milliseconds on a loaded one), so that each pass is wider than its label; only
    // step 3 of the two traced is drawn.
    ASSERT_EQ(cli("trace timeline --width 200000 --step 3 " +
                  (dir_ / (schedule + ".rank0.json")).string() + " " +
                  (dir_ / (schedule + ".rank1.json")).string()),
              0)
        << output();
    EXPECT_NE(output().find("step 3: "), std::string::npos) << output();
    EXPECT_EQ(drawn_passes(output()), schedule == "gpipe" ? want_gpipe : want_1f1b) << output();
  }
}

// A hand-made trace of one rank: 100 us of step 1 drawn in 10 columns of 10 us.
TEST_F(HybridOverShm, TheTimelineShowsPassesWaitsAndUpdatesColumnByColumn) {
  std::ofstream(dir_ / "hand.json") << R"({"traceEvents": [
    {"name": "train_step", "ph": "X", "pid": 0, "tid": 0, "ts": 0, "dur": 100, "args": {"step": 1}},
    {"name": "forward", "ph": "X", "pid": 0, "tid": 0, "ts": 0, "dur": 12, "args": {"layer": 0, "micro_batch": 0, "stage": 0}},
    {"name": "forward", "ph": "X", "pid": 0, "tid": 0, "ts": 12.5, "dur": 7.5, "args": {"layer": 1, "micro_batch": 0, "stage": 0}},
    {"name": "wait recv", "ph": "X", "pid": 0, "tid": 0, "ts": 20, "dur": 10, "args": {"id": 1}},
    {"name": "backward", "ph": "X", "pid": 0, "tid": 0, "ts": 30, "dur": 20, "args": {"layer": 0, "micro_batch": 0, "stage": 0}},
    {"name": "backward", "ph": "X", "pid": 0, "tid": 0, "ts": 50, "dur": 4, "args": {"layer": 0, "micro_batch": 1, "stage": 0}},
    {"name": "optimizer_step", "ph": "X", "pid": 0, "tid": 0, "ts": 90, "dur": 10, "args": {"step": 1}},
    {"name": "optimizer_step", "ph": "X", "pid": 0, "tid": 3, "ts": 60, "dur": 10, "args": {"step": 1}}
  ]})";
  ASSERT_EQ(cli("trace timeline --width 10 " + (dir_ / "hand.json").string()), 0) << output();
  // Columns: F0 F0 . B0 B0 idle(B1 covers 4 of 10 us) idle idle idle U; tid 3 is not the rank's.
  EXPECT_NE(output().find("\nrank 0 stage 0  F0.B0    U\n"), std::string::npos) << output();
  EXPECT_NE(output().find("step 1: 0.100 ms, 0.01 ms per column\n"), std::string::npos) << output();
}

TEST_F(HybridOverShm, TheTimelineRefusesAMissingFileATextFileAndAStepNotTraced) {
  const auto missing = (dir_ / "missing.json").string();
  EXPECT_EQ(cli("trace timeline " + missing), 1);
  EXPECT_NE(output().find("cannot open " + missing), std::string::npos) << output();
  EXPECT_NE(output().find("--trace FILE"), std::string::npos) << output();

  std::ofstream(dir_ / "notes.json") << "not a trace\n";
  EXPECT_EQ(cli("trace timeline " + (dir_ / "notes.json").string()), 1);
  EXPECT_NE(output().find((dir_ / "notes.json").string() + " is not JSON"), std::string::npos)
      << output();

  std::ofstream(dir_ / "one.json") << R"({"traceEvents": [{"name": "train_step", "ph": "X",
    "pid": 0, "tid": 0, "ts": 0, "dur": 5, "args": {"step": 7}}]})";
  EXPECT_EQ(cli("trace timeline --step 8 " + (dir_ / "one.json").string()), 1);
  EXPECT_NE(output().find("--step 8 is not in the traces; they hold step(s) 7"), std::string::npos)
      << output();
  EXPECT_EQ(cli("trace timeline --width 3 " + (dir_ / "one.json").string()), 2);
  EXPECT_NE(output().find("--width 3: give a whole number of at least 10"), std::string::npos)
      << output();
}

}  // namespace
