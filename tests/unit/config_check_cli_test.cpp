// `tessera config check` is where every mistake in a config is found: each mutation of a good
// config below exits 2 from `config check` with where the value came from (run.ini:LINE, the
// flag or the variable) and what is wrong, and no message ever shows a C++ source path. The
// mutations are the classes issue 12 found passing `config check` and failing only after the
// workers started (or wrapping silently).
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

namespace tessera {
namespace {

namespace fs = std::filesystem;

struct CliResult {
  int exit_code = -1;
  std::string out;
  std::string err;
};

class ScratchDir {
 public:
  ScratchDir() {
    static int counter = 0;
    path_ = fs::temp_directory_path() / ("tessera_config_check_" + std::to_string(::getpid()) +
                                         "_" + std::to_string(counter++));
    fs::create_directories(path_);
  }
  ~ScratchDir() {
    std::error_code ec;
    fs::remove_all(path_, ec);
  }
  ScratchDir(const ScratchDir&) = delete;
  ScratchDir& operator=(const ScratchDir&) = delete;
  [[nodiscard]] const fs::path& path() const { return path_; }

 private:
  fs::path path_;
};

// Runs the CLI with `env` prepended (VAR=value ...); stdout and stderr captured.
CliResult run_cli(const std::string& args, const std::string& env = "") {
  static int calls = 0;
  const std::string err_file = ::testing::TempDir() + "tessera_config_check_err." +
                               std::to_string(::getpid()) + "." + std::to_string(calls++);
  // CONFIG_CHECK_TEST_CLI runs the table against another build's binary (to see which
  // mutations an older tessera let through).
  const char* other = std::getenv("CONFIG_CHECK_TEST_CLI");
  const std::string cli = other != nullptr ? other : TESSERA_CLI_PATH;
  const std::string command =
      "env -u TESSERA_PLUGIN_PATH " + env + " " + cli + " " + args + " 2>" + err_file;
  CliResult result;
  FILE* pipe = ::popen(command.c_str(), "r");
  if (pipe == nullptr) return result;
  char buffer[4096];
  for (std::size_t n; (n = std::fread(buffer, 1, sizeof buffer, pipe)) > 0;)
    result.out.append(buffer, n);
  const int status = ::pclose(pipe);
  result.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  std::ostringstream err;
  err << std::ifstream(err_file).rdbuf();
  result.err = err.str();
  std::remove(err_file.c_str());
  return result;
}

// A small, valid run: synthetic data, a small mlp, ddp over local threads. Blank lines 13, 14
// and 27 are spare places in [train] and [optimizer.sgd] for a mutation to add a key.
const std::vector<std::string> kGoodConfig = {
    "[runtime]",            // 1
    "transport = local",    // 2
    "world_size = 2",       // 3
    "",                     // 4
    "[train]",              // 5
    "strategy = ddp",       // 6
    "model = mlp",          // 7
    "optimizer = sgd",      // 8
    "dataset = synthetic",  // 9
    "epochs = 1",           // 10
    "batch_size = 32",      // 11
    "lr = 0.1",             // 12
    "",                     // 13
    "",                     // 14
    "",                     // 15
    "[model.mlp]",          // 16
    "layers = 20,16,10",    // 17
    "",                     // 18
    "[dataset.synthetic]",  // 19
    "samples = 1000",       // 20
    "test_samples = 100",   // 21
    "features = 20",        // 22
    "classes = 10",         // 23
    "",                     // 24
    "[optimizer.sgd]",      // 25
    "momentum = 0.9",       // 26
    "",                     // 27
    "",                     // 28
    "[strategy.ddp]",       // 29
    "bucket_cap = 25MiB",   // 30
};

// One mutation: lines of the good config replaced (by number, 0: appended), the line the
// message must name ("run.ini:LINE: ") and what it must say.
struct Mutation {
  const char* name;
  std::vector<std::pair<int, std::string>> lines;
  int reported_line;
  const char* expected;
};

std::string config_text(const std::vector<std::pair<int, std::string>>& changes,
                        const char* eol = "\n") {
  std::vector<std::string> lines = kGoodConfig;
  for (const auto& [number, text] : changes) {
    if (number == 0) {
      lines.push_back(text);
    } else {
      lines[static_cast<std::size_t>(number - 1)] = text;
    }
  }
  std::string out;
  for (const auto& line : lines) out += line + eol;
  return out;
}

const Mutation kMutations[] = {
    {"world_size_zero", {{3, "world_size = 0"}}, 3, "[runtime] world_size: '0' is out of range"},
    {"world_size_2_pow_32_plus_3",
     {{3, "world_size = 4294967299"}},
     3,
     "'4294967299' is out of range: must be in [1, 65536]"},
    {"world_size_2_pow_31", {{3, "world_size = 2147483648"}}, 3, "is out of range"},
    {"world_size_2_pow_32", {{3, "world_size = 4294967296"}}, 3, "is out of range"},
    {"world_size_past_int64", {{3, "world_size = 99999999999999999999"}}, 3, "is not an int"},
    {"world_size_more_than_the_host",
     {{3, "world_size = 60000"}},
     3,
     "ranks is more than this host runs"},
    {"timeout_zero", {{4, "timeout = 0s"}}, 4, "[runtime] timeout: '0s' is out of range"},
    {"epochs_zero", {{10, "epochs = 0"}}, 10, "[train] epochs: '0' is out of range"},
    {"batch_size_negative", {{11, "batch_size = -64"}}, 11, "[train] batch_size: '-64' is out of"},
    {"lr_negative", {{12, "lr = -0.1"}}, 12, "[train] lr: '-0.1' is out of range"},
    {"schedule_unknown", {{13, "schedule = linear"}}, 13, "'linear' is not one of constant|step"},
    {"micro_batches_above_batch",
     {{13, "micro_batches = 64"}},
     13,
     "is more than [train] batch_size = 32"},
    {"warmup_longer_than_the_run",
     {{13, "schedule = cosine"}, {14, "warmup_steps = 100"}},
     14,
     "[train] warmup_steps = 100 ("},
    {"min_lr_above_lr",
     {{13, "schedule = cosine"}, {14, "min_lr = 1"}},
     14,
     "[train] min_lr = 1 ("},
    {"step_size_zero", {{13, "step_size = 0"}}, 13, "[train] step_size: '0' is out of range"},
    {"checkpoint_every_without_dir", {{13, "checkpoint_every = 5"}}, 13, "checkpoint_dir is empty"},
    {"checkpoint_keep_zero", {{13, "checkpoint_keep = 0"}}, 13, "checkpoint_keep: '0' is out of"},
    {"progress_unknown",
     {{13, "progress = fancy"}},
     13,
     "'fancy' is not one of auto|bar|lines|off"},
    {"seed_negative", {{13, "seed = -5"}}, 13, "[train] seed: '-5' is out of range"},
    {"max_grad_norm_negative", {{13, "max_grad_norm = -1"}}, 13, "max_grad_norm: '-1' is out of"},
    {"model_unknown", {{7, "model = mlpp"}}, 7, "no model plugin named 'mlpp'"},
    {"layers_too_large_for_the_host",
     {{17, "layers = 20,100000000000,10"}},
     17,
     "more than this host's"},
    {"layers_not_numbers", {{17, "layers = 20,x,10"}}, 17, "'x' in '20,x,10'"},
    {"mlp_threads_zero", {{18, "threads = 0"}}, 18, "threads: '0' is out of range"},
    {"classes_mismatch",
     {{23, "classes = 100000"}},
     23,
     "one target of 100000 classes, the model takes f32 20"},
    // The message leads with the data set's first value set and lists each with its line.
    {"features_mismatch", {{22, "features = 21"}}, 23, "samples of f32 21 in"},
    {"features_zero", {{22, "features = 0"}}, 22, "features: '0' is out of range"},
    {"samples_zero", {{20, "samples = 0"}}, 20, "samples: '0' is out of range"},
    {"test_samples_zero", {{21, "test_samples = 0"}}, 21, "test_samples: '0' is out of range"},
    {"momentum_negative", {{26, "momentum = -0.9"}}, 26, "momentum: '-0.9' is out of range"},
    {"nesterov_without_momentum",
     {{26, "momentum = 0"}, {27, "nesterov = true"}},
     26,
     "nesterov = true needs momentum > 0"},
    {"adam_beta1_one",
     {{8, "optimizer = adam"}, {25, "[optimizer.adam]"}, {26, "beta1 = 1"}},
     26,
     "beta1: '1' is out of range"},
    {"adam_eps_zero",
     {{8, "optimizer = adam"}, {25, "[optimizer.adam]"}, {26, "eps = 0"}},
     26,
     "eps: '0' is out of range"},
    {"bucket_cap_one_byte", {{30, "bucket_cap = 1B"}}, 30, "bucket_cap: '1B' is out of range"},
    {"zero2_staging_windows_negative",
     {{6, "strategy = zero2"}, {29, "[strategy.zero2]"}, {30, "staging_windows = -1"}},
     30,
     "staging_windows: '-1' is out of range: must be in [1, 2]"},
    {"shm_chunk_size_tiny",
     {{2, "transport = shm"}, {29, "[transport.shm]"}, {30, "chunk_size = 1"}},
     30,
     "chunk_size: '1' is out of range"},
    // Longer than any store's lease: it passed here and failed in every rank.
    {"failure_timeout_beyond_any_lease",
     {{29, "[elastic]"}, {30, "failure_timeout = 300000000000ms"}},
     30,
     "failure_timeout: '300000000000ms' is out of range"},
    {"unknown_key", {{26, "momentun = 0.9"}}, 26, "did you mean 'momentum'?"},
    {"unknown_section_without_keys", {{28, "[optimiser.sgd]"}}, 28, "unknown section [optimiser"},
    {"unknown_section_names_its_header",
     {{28, "[strategy.dpp]"}, {29, "bucket_cap = 25MiB"}, {30, ""}},
     28,
     "unknown section [strategy.dpp]; did you mean [strategy.ddp]?"},
};

class ConfigCheckCli : public ::testing::Test {
 protected:
  fs::path write(const std::string& text) {
    const auto file = dir_.path() / "run.ini";
    std::ofstream(file, std::ios::binary) << text;
    return file;
  }
  ScratchDir dir_;
};

void expect_user_error(const CliResult& r, const std::string& where, const std::string& what) {
  EXPECT_EQ(r.exit_code, 2) << r.err;
  EXPECT_NE(r.err.find(where), std::string::npos) << "no '" << where << "' in: " << r.err;
  EXPECT_NE(r.err.find(what), std::string::npos) << "no '" << what << "' in: " << r.err;
  EXPECT_EQ(r.err.find(".cpp:"), std::string::npos) << r.err;
  EXPECT_EQ(r.err.find(".hpp:"), std::string::npos) << r.err;
  EXPECT_EQ(r.err.find("internal error"), std::string::npos) << r.err;
}

TEST_F(ConfigCheckCli, TheGoodConfigPassesAndShowsTheRunsFigures) {
  const auto file = write(config_text({}));
  const auto r = run_cli("config check " + file.string());
  EXPECT_EQ(r.exit_code, 0) << r.err;
  // 1000 samples / (2 ranks x 32) = 15.6, so 16 steps.
  EXPECT_NE(r.out.find("# the run: 2 rank(s), 1000 training samples, 16 steps per epoch, 16 steps"),
            std::string::npos)
      << r.out;
}

TEST_F(ConfigCheckCli, EveryMutationExitsTwoWithFileAndLine) {
  for (const auto& m : kMutations) {
    SCOPED_TRACE(m.name);
    const auto file = write(config_text(m.lines));
    const auto r = run_cli("config check " + file.string());
    expect_user_error(r, file.string() + ":" + std::to_string(m.reported_line) + ": ", m.expected);
  }
}

TEST_F(ConfigCheckCli, WarmupLongerThanTheRunGivesTheRunsSteps) {
  const auto file = write(config_text({{13, "schedule = cosine"}, {14, "warmup_steps = 100"}}));
  const auto r = run_cli("config check " + file.string());
  expect_user_error(r, file.string() + ":14: ",
                    "leaves no steps to decay: the run has 16 steps (1 epoch of 16: 1000 samples / "
                    "(2 ranks x batch_size 32), rounded up)");
}

TEST_F(ConfigCheckCli, APluginsCrossOptionRefusalListsWhereItsValuesWereSet) {
  const auto file = write(config_text({{26, "momentum = 0"}, {27, "nesterov = true"}}));
  const auto r = run_cli("config check " + file.string());
  expect_user_error(r, file.string() + ":26: ", "nesterov = true needs momentum > 0");
  EXPECT_NE(r.err.find("nesterov = true (" + file.string() + ":27)"), std::string::npos) << r.err;
}

TEST_F(ConfigCheckCli, AClassMismatchIsRefusedBeforeTheDataIsGenerated) {
  const auto file = write(config_text({{23, "classes = 100000"}}));
  const auto start = std::chrono::steady_clock::now();
  const auto r = run_cli("config check " + file.string());
  const auto seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  expect_user_error(r, file.string() + ":23: ", "100000 classes");
  EXPECT_LT(seconds, 10.0);
}

TEST_F(ConfigCheckCli, CrOnlyLineEndingsAreLinesToo) {
  const auto file = write(config_text({{11, "batch_size = 0"}}, "\r"));
  expect_user_error(run_cli("config check " + file.string()),
                    file.string() + ":11: ", "[train] batch_size: '0' is out of range");

  const auto good = write(config_text({{3, "world_size = 3"}}, "\r"));
  const auto ok = run_cli("config check " + good.string());
  EXPECT_EQ(ok.exit_code, 0) << ok.err;
  EXPECT_NE(ok.out.find("world_size = 3  # " + good.string() + ":3"), std::string::npos) << ok.out;
}

TEST_F(ConfigCheckCli, FlagsAndVariablesAreNamedAsTheSource) {
  const auto file = write(config_text({}));
  expect_user_error(run_cli("config check " + file.string() + " --runtime.world_size=4294967299"),
                    "flag --runtime.world_size: ", "'4294967299' is out of range");
  expect_user_error(run_cli("config check " + file.string(), "TESSERA_TRAIN_EPOCHS=0"),
                    "environment TESSERA_TRAIN_EPOCHS: ", "'0' is out of range");
  expect_user_error(run_cli("config check " + file.string() + " --strategy.ddp.first_bucket=0"),
                    "flag --strategy.ddp.first_bucket: ", "'0' is out of range");
}

// A refusal about several values of a plugin (the hybrid mesh: tensor_parallel x
// pipeline_parallel against the world) once led with the file line of whichever key sorted
// first, even when the value at fault came from a flag.
TEST_F(ConfigCheckCli, AMeshRefusedBecauseOfAFlagLeadsWithTheFlag) {
  const auto file = write(config_text(
      {{6, "strategy = hybrid"}, {29, "[strategy.hybrid]"}, {30, "pipeline_parallel = 1"}}));
  const auto r = run_cli("config check " + file.string() + " --strategy.hybrid.tensor_parallel=3");
  expect_user_error(r, "flag --strategy.hybrid.tensor_parallel, " + file.string() + ":30: ",
                    "need a world size that is a multiple of 3");
  EXPECT_NE(r.err.find("tensor_parallel = 3 (flag --strategy.hybrid.tensor_parallel)"),
            std::string::npos)
      << r.err;
  EXPECT_NE(r.err.find("pipeline_parallel = 1 (" + file.string() + ":30)"), std::string::npos)
      << r.err;
}

// A `tessera train` command line checks unchanged: --config FILE, and -n as [runtime]
// world_size.
TEST_F(ConfigCheckCli, TakesConfigAndDashNAsTrainDoes) {
  const auto file = write(config_text({}));
  for (const auto* n : {"-n 4", "-n4", "-n=4"}) {
    const auto r = run_cli("config check " + file.string() + " " + n);
    EXPECT_EQ(r.exit_code, 0) << n << ": " << r.err;
    EXPECT_NE(r.out.find("# the run: 4 rank(s)"), std::string::npos) << n << ": " << r.out;
  }
  const auto zero = run_cli("config check " + file.string() + " -n 0");
  EXPECT_EQ(zero.exit_code, 2) << zero.err;
  EXPECT_NE(zero.err.find("config check: -n 0: '0' is out of range"), std::string::npos)
      << zero.err;
  const auto as_train = run_cli("config check --config " + file.string() + " -n 3");
  EXPECT_EQ(as_train.exit_code, 0) << as_train.err;
  EXPECT_NE(as_train.out.find("# the run: 3 rank(s)"), std::string::npos) << as_train.out;
  const auto missing = run_cli("config check " + file.string() + " -n");
  EXPECT_EQ(missing.exit_code, 2) << missing.err;
  EXPECT_NE(missing.err.find("-n needs a value"), std::string::npos) << missing.err;
}

TEST_F(ConfigCheckCli, AStringOptionCanBeClearedFromTheCommandLine) {
  const auto file = write(config_text({{13, "checkpoint_dir = ckpt"}}));
  const auto r = run_cli("config check " + file.string() + " --train.checkpoint_dir=");
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.out.find("= \"\"  # flag --train.checkpoint_dir"), std::string::npos) << r.out;
}

TEST_F(ConfigCheckCli, TrainTakesAnEmptyValueToClearAStringOption) {
  // program_options refuses "--name=" of its own; the config flags never reach it.
  const auto file = write(config_text({{13, "checkpoint_dir = ckpt"}}));
  const auto r = run_cli("train --config " + file.string() +
                         " --train.checkpoint_dir= --train.max_steps=2 --train.progress=off");
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.out.find("test accuracy"), std::string::npos) << r.out;
  EXPECT_FALSE(std::filesystem::exists(dir_.path() / "ckpt"));
}

TEST_F(ConfigCheckCli, RelativePathsInAFileAreRelativeToTheFile) {
  const auto file = write(config_text({{13, "metrics_file = out/m.jsonl"}}));
  const auto r = run_cli("config check " + file.string());
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.out.find("= " + (dir_.path() / "out/m.jsonl").string() + "  # " + file.string()),
            std::string::npos)
      << r.out;
  const auto flag = run_cli("config check " + file.string() + " --train.metrics_file=out/m.jsonl");
  EXPECT_NE(flag.out.find("= out/m.jsonl  # flag --train.metrics_file"), std::string::npos)
      << flag.out;
}

TEST_F(ConfigCheckCli, TrainRefusesWhatConfigCheckRefusesBeforeStartingRanks) {
  const auto file = write(config_text({{13, "schedule = cosine"}, {14, "warmup_steps = 100"}}));
  expect_user_error(run_cli("train --config " + file.string()),
                    file.string() + ":14: ", "leaves no steps to decay");
  const auto good = write(config_text({}));
  expect_user_error(run_cli("train --config " + good.string() + " -n 0"),
                    "train: -n 0: ", "'0' is out of range");
  expect_user_error(run_cli("train --config " + good.string() + " -n 4294967298"), "train: -n ",
                    "is out of range");
}

// A GPU run over a transport that moves host memory only is refused before any rank starts,
// naming where the device was asked for.
TEST_F(ConfigCheckCli, ADeviceTheTransportCannotMoveIsRefusedBeforeRanksStart) {
  const auto file = write(config_text({}));
  expect_user_error(run_cli("config check " + file.string() + " --runtime.device=cuda"),
                    "flag --runtime.device: ", "moves host memory only");
  expect_user_error(run_cli("train --config " + file.string() + " --runtime.device=cuda"),
                    "flag --runtime.device: ", "use [runtime] transport = nccl");
  expect_user_error(run_cli("config check " + file.string() + " --runtime.device=tpu"),
                    "flag --runtime.device: ", "cuda");
}

// Over a GPU transport, a strategy that keeps its state on the host (its plugin declares no
// TESSERA_DEVICE_CUDA) is refused as early, naming it. (Needs the nccl plugin built; no GPU:
// nothing connects.)
TEST_F(ConfigCheckCli, AStrategyThatCannotRunOnTheGpuIsRefusedBeforeRanksStart) {
  if (run_cli("plugins").out.find("transport.nccl") == std::string::npos) {
    GTEST_SKIP() << "the nccl transport is not built (no CUDA toolkit with NCCL found)";
  }
  const auto file = write(config_text({}));
  expect_user_error(
      run_cli("config check " + file.string() +
              " --runtime.device=cuda --runtime.transport=nccl --train.strategy=hybrid"),
      "flag --runtime.device: ",
      "the strategy [train] strategy = hybrid (flag --train.strategy) keeps its state in host "
      "memory (its plugin "
      "declares no TESSERA_DEVICE_CUDA)");
  // So is an elastic run, whose copies of the state live in host memory.
  expect_user_error(run_cli("config check " + file.string() +
                            " --runtime.device=cuda --runtime.transport=nccl "
                            "--train.strategy=zero2 --elastic.enabled=true"),
                    "flag --runtime.device: ", "train elastic runs with device = cpu");
  const auto zero2 =
      run_cli("config check " + file.string() +
              " --runtime.device=cuda --runtime.transport=nccl --train.strategy=zero2");
  EXPECT_EQ(zero2.exit_code, 0) << zero2.err;
}

// Under a launcher, the world the config describes must be the world that meets.
TEST_F(ConfigCheckCli, AWorldThatDoesNotAddUpUnderALauncherIsAnError) {
  // Against an older binary (CONFIG_CHECK_TEST_CLI) this would fork until fork fails.
  if (std::getenv("CONFIG_CHECK_TEST_CLI") != nullptr) GTEST_SKIP() << "not against another build";
  const auto forks = run_cli("launch -n 100000 -- /bin/true");
  EXPECT_EQ(forks.exit_code, 2) << forks.err;
  EXPECT_NE(forks.err.find("launch: -n 100000: 100000 ranks is more than this host runs"),
            std::string::npos)
      << forks.err;

  const auto good = write(config_text({}));
  const auto threads = run_cli("launch -n 2 -- " TESSERA_CLI_PATH " train --config " +
                               good.string() + " --runtime.transport=local");
  EXPECT_NE(threads.exit_code, 0) << threads.err;
  EXPECT_NE(threads.err.find("runs every rank as a thread of one process, but this process is "
                             "rank "),
            std::string::npos)
      << threads.err;
  EXPECT_NE(threads.err.find(" of 2 started by tessera launch"), std::string::npos) << threads.err;

  const auto processes = run_cli("launch -n 1 -- " TESSERA_CLI_PATH " train --config " +
                                 good.string() + " --runtime.transport=shm --runtime.store=tcp");
  EXPECT_NE(processes.exit_code, 0) << processes.err;
  EXPECT_NE(processes.err.find(good.string() + ":3: [runtime] world_size = 2 but this process is "
                                               "rank 0 of 1 started by tessera launch"),
            std::string::npos)
      << processes.err;
}

// A mutation fuzz over every value line of the good config: whatever a value becomes, `config
// check` either accepts it (0) or refuses it as the user's mistake (2) with a location, never
// with a crash, an internal error or a source path.
TEST_F(ConfigCheckCli, MutatedValuesAreAcceptedOrRefusedWithALocation) {
  const char* values[] = {"0", "-1", "4294967296", "1e400", "", "x", "9223372036854775808"};
  for (std::size_t i = 0; i < kGoodConfig.size(); ++i) {
    const auto eq = kGoodConfig[i].find(" = ");
    if (eq == std::string::npos) continue;
    for (const char* value : values) {
      const int line = static_cast<int>(i + 1);
      const std::string text = kGoodConfig[i].substr(0, eq) + " = " + value;
      SCOPED_TRACE(text);
      const auto file = write(config_text({{line, text}}));
      const auto r = run_cli("config check " + file.string());
      EXPECT_TRUE(r.exit_code == 0 || r.exit_code == 2) << r.exit_code << " " << r.err;
      EXPECT_EQ(r.err.find(".cpp:"), std::string::npos) << r.err;
      EXPECT_EQ(r.err.find("internal error"), std::string::npos) << r.err;
      if (r.exit_code == 2) {
        EXPECT_NE(r.err.find(file.string() + ":"), std::string::npos) << r.err;
      }
    }
  }
}

}  // namespace
}  // namespace tessera
