// `tessera train` with [elastic] enabled = true over shm: three launched workers, one SIGKILLed
// while it trains. The launcher reports it and goes on, the survivors regroup from the copies they
// hold and finish; nothing is left in /dev/shm. Below min_workers the survivor stops with a
// checkpoint of its state, from which one worker resumes the run.
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <set>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "../multihost/shell_job.hpp"

namespace {

namespace fs = std::filesystem;
using tessera::test::process_with;
using tessera::test::processes_with;
using namespace std::chrono_literals;

// The pid in a name that tessera puts in /dev/shm: "tessera-shm-<pid>-<hex>" (an shm group's
// segment) or "tessera-replica-<pid namespace>-<pid>-<nonce>" (an elastic copy area); -1 for
// any other name.
pid_t creator_of(const std::string& name) {
  std::string rest;
  if (name.starts_with("tessera-shm-")) {
    rest = name.substr(std::string("tessera-shm-").size());
  } else if (name.starts_with("tessera-replica-")) {
    rest = name.substr(std::string("tessera-replica-").size());
    rest = rest.substr(std::min(rest.size(), rest.find('-') + 1));
  } else {
    return -1;
  }
  const auto digits = rest.find_first_not_of("0123456789");
  if (digits == 0 || digits == std::string::npos || rest[digits] != '-') return -1;
  return static_cast<pid_t>(std::stol(rest.substr(0, digits)));
}

// The names in /dev/shm that a process of `job` created. /dev/shm is shared by every process
// on the host (other tests, other jobs), so a test judges only what its own job made.
std::set<std::string> shm_names_of(const std::set<pid_t>& job) {
  std::set<std::string> names;
  for (const auto& entry : fs::directory_iterator("/dev/shm")) {
    const auto name = entry.path().filename().string();
    if (job.contains(creator_of(name))) names.insert(name);
  }
  return names;
}

// The committed checkpoints (step-N folders) in `folder`.
std::size_t tessera_checkpoints(const fs::path& folder) {
  std::size_t n = 0;
  if (!fs::exists(folder)) return 0;
  for (const auto& entry : fs::directory_iterator(folder)) {
    n += entry.path().filename().string().starts_with("step-") ? 1 : 0;
  }
  return n;
}

std::size_t lines_of(const fs::path& file) {
  std::ifstream in(file);
  std::size_t n = 0;
  for (std::string line; std::getline(in, line);) ++n;
  return n;
}

std::string job_flags(const fs::path& dir) {
  return " --runtime.transport=shm --runtime.timeout=60s --elastic.enabled=true"
         " --train.strategy=ddp --elastic.heartbeat=100ms"
         " --elastic.failure_timeout=2s --train.dataset=synthetic"
         " --dataset.synthetic.samples=30000 --dataset.synthetic.test_samples=500"
         " --dataset.synthetic.features=64 --dataset.synthetic.classes=4"
         " --model.mlp.layers=64,256,256,4 --train.optimizer=sgd --optimizer.sgd.momentum=0.9"
         " --train.batch_size=16 --train.lr=0.02 --train.progress=off"
         " --train.seed=5 --train.metrics_file=" +
         (dir / "metrics.jsonl").string() + " --summary " + (dir / "summary.json").string();
}

std::string read_file(const fs::path& file) {
  std::ifstream in(file);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

// Checks what a run that finished wrote to its metrics file: in each epoch the samples of the
// steps add up to the data set's (30000), a redone step's record replacing the earlier one, and
// each epoch has one evaluation.
void expect_metrics_add_up(const fs::path& file) {
  std::map<std::int64_t, std::map<std::int64_t, std::int64_t>> samples;  // epoch -> step -> n
  std::map<std::int64_t, int> evaluations;                               // epoch -> count
  std::istringstream lines(read_file(file));
  for (std::string line; std::getline(lines, line);) {
    const auto record = nlohmann::json::parse(line);
    const auto epoch = record["epoch"].get<std::int64_t>();
    if (record.contains("test_accuracy")) {
      ++evaluations[epoch];
    } else {
      samples[epoch][record["step"].get<std::int64_t>()] = record["samples"].get<std::int64_t>();
    }
  }
  ASSERT_FALSE(samples.empty());
  for (const auto& [epoch, steps] : samples) {
    std::int64_t total = 0;
    for (const auto& [step, n] : steps) total += n;
    EXPECT_EQ(total, 30000) << "epoch " << epoch;
    EXPECT_EQ(evaluations[epoch], 1) << "epoch " << epoch;
  }
}

// A job of `workers` shm workers training `tessera train -n <workers>` elastic in `dir`; the
// workers named `victims` (n0.w1 alone unless said) get `signal` back to back (SIGKILL, or
// SIGSTOP and never a SIGCONT) once the run has trained 50 steps. Returns what the job printed;
// checks its exit (0, or not 0 with expect_failure), the metrics of a run that finished and
// /dev/shm, and removes what the job wrote there but the checkpoints.
std::string run_and_kill_one(
    const std::string& extra_flags, int workers = 3, bool expect_failure = false,
    const fs::path& dir = fs::temp_directory_path() /
                          ("tessera-elastic-shm-" + std::to_string(::getpid())),
    const std::vector<std::string>& victims = {"n0.w1"}, int signal = SIGKILL) {
  fs::remove_all(dir);
  fs::create_directories(dir);
  // A token only this test's job carries, so that the kill finds its worker and no other.
  const std::string tag = "ELASTIC_SHM_TEST_JOB=" + std::to_string(::getpid());
  const std::string command = tag + " timeout 300 " + std::string(TESSERA_CLI_PATH) + " train -n " +
                              std::to_string(workers) + job_flags(dir) + " " + extra_flags + " > " +
                              (dir / "out.txt").string() + " 2>&1";
  std::atomic<bool> job_over{false};
  std::thread job([&] {
    const int status = std::system(command.c_str());
    if (expect_failure) {
      EXPECT_NE(status, 0);
    } else {
      EXPECT_EQ(status, 0);
    }
    job_over = true;
  });

  // Every process of the job (launcher, workers, a replacement), seen while it runs: the names
  // it may leave in /dev/shm carry their pids. Kill the victims once the run has trained 50
  // steps.
  std::set<pid_t> job_processes;
  const auto give_up = std::chrono::steady_clock::now() + 120s;
  bool killed = false;
  while (!job_over) {
    job_processes.merge(processes_with({tag}));
    if (!killed && std::chrono::steady_clock::now() < give_up &&
        lines_of(dir / "metrics.jsonl") >= 50) {
      killed = true;
      for (const auto& id : victims) {
        // Only a worker of this job: it inherited the tag.
        const pid_t victim = process_with({"TESSERA_WORKER_ID=" + id, tag});
        EXPECT_GT(victim, 0) << "worker " << id << " was gone before its kill";
        if (victim > 0) {
          EXPECT_EQ(::kill(victim, signal), 0);
        }
      }
    }
    std::this_thread::sleep_for(20ms);  // the poll's period: the job says nothing when it is done
  }
  job.join();
  if (!killed) {
    ADD_FAILURE() << "the job never reached step 50";
  }
  EXPECT_GE(job_processes.size(), static_cast<std::size_t>(workers) + 1) << "launcher and workers";

  const auto out = read_file(dir / "out.txt");
  // The job's segments are gone, the dead worker's too (the survivors and the launcher
  // unlink what they created; a dead worker created none it did not already unlink).
  const auto left_over = shm_names_of(job_processes);
  EXPECT_TRUE(left_over.empty()) << *left_over.begin();
  if (!expect_failure) expect_metrics_add_up(dir / "metrics.jsonl");
  fs::remove_all(dir / "metrics.jsonl");
  fs::remove_all(dir / "summary.json");
  fs::remove_all(dir / "out.txt");
  return out;
}

TEST(ElasticOverShm, AKilledWorkerIsDroppedAndTheOthersFinishTheRun) {
  const auto out = run_and_kill_one("--train.epochs=1");
  fs::remove_all(fs::temp_directory_path() / ("tessera-elastic-shm-" + std::to_string(::getpid())));
  EXPECT_NE(out.find("elastic: worker n0.w1 left: rank 1 was killed by signal 9"),
            std::string::npos)
      << out;
  EXPECT_NE(out.find(" generation 2: 2 worker(s); left n0.w1; joined -; failed at step"),
            std::string::npos)
      << out;
  EXPECT_NE(out.find("(memory)"), std::string::npos) << out;
  EXPECT_NE(out.find("test accuracy"), std::string::npos) << out;
}

// A worker stopped for good (SIGSTOP, never continued) is dropped at its lease's end; the
// others finish the run, and the launcher then ends the stopped worker, so that `tessera train`
// exits (it once waited for it forever, deaf to SIGTERM).
TEST(ElasticOverShm, AWorkerStoppedForeverIsDroppedAndTheJobStillEnds) {
  const auto started = std::chrono::steady_clock::now();
  const auto out = run_and_kill_one(
      "--train.epochs=1", 3, false,
      fs::temp_directory_path() / ("tessera-elastic-shm-" + std::to_string(::getpid())), {"n0.w1"},
      SIGSTOP);
  fs::remove_all(fs::temp_directory_path() / ("tessera-elastic-shm-" + std::to_string(::getpid())));
  EXPECT_NE(out.find(" generation 2: 2 worker(s); left n0.w1; joined -; failed at step"),
            std::string::npos)
      << out;
  EXPECT_NE(out.find("elastic: worker n0.w1 (rank 1) lost its lease and the run finished "
                     "without it; stopping it"),
            std::string::npos)
      << out;
  EXPECT_NE(out.find("test accuracy"), std::string::npos) << out;
  EXPECT_LT(std::chrono::steady_clock::now() - started, 60s) << out;
}

// The same kill with a sharded inner (zero2): the dead rank's shard comes back from the copy
// another rank holds, sent over the side channel while the steps ran, and at most the one step
// whose copies were still on their way is redone.
TEST(ElasticOverShm, AKilledWorkersShardComesBackFromItsCopyOnAnotherRank) {
  const auto out = run_and_kill_one("--train.epochs=1 --train.strategy=zero2");
  fs::remove_all(fs::temp_directory_path() / ("tessera-elastic-shm-" + std::to_string(::getpid())));
  const std::string lead = " generation 2: 2 worker(s); left n0.w1; joined -; failed at step ";
  const auto at = out.find(lead);
  ASSERT_NE(at, std::string::npos) << out;
  long failed = -1;
  long resumed = -1;
  ASSERT_EQ(std::sscanf(out.c_str() + at + lead.size(), "%ld, going on from step %ld (memory)",
                        &failed, &resumed),
            2)
      << out;
  std::printf("failed at step %ld, going on from step %ld\n", failed, resumed);
  EXPECT_GE(resumed, 0) << out;
  EXPECT_LE(failed - resumed, 1) << out;  // the promise: at most one step lost
  EXPECT_NE(out.find("test accuracy"), std::string::npos) << out;
}

// Two of four zero2 workers killed back to back: the second dies while the survivors regroup
// after the first (or just before), and the regroup takes it in. Their shards come back from
// the copies the survivors hold (the ring 0 -> 1 -> 2 -> 3 keeps w1's on w2 and w3's on w0), and
// the run ends at two workers.
TEST(ElasticOverShm, ASecondWorkerKilledDuringTheRegroupIsFoldedIntoIt) {
  const fs::path dir =
      fs::temp_directory_path() / ("tessera-elastic-shm-twice-" + std::to_string(::getpid()));
  const auto out = run_and_kill_one("--train.epochs=1 --train.strategy=zero2", 4, false, dir,
                                    {"n0.w1", "n0.w3"});
  fs::remove_all(dir);
  for (const auto& id : {"n0.w1", "n0.w3"}) {
    EXPECT_NE(out.find(std::string("elastic: worker ") + id + " left:"), std::string::npos)
        << id << "\n"
        << out;
  }
  // The last world: the two survivors, rebuilt from memory.
  const auto last = out.rfind(" generation ");
  ASSERT_NE(last, std::string::npos) << out;
  const auto line = out.substr(last, out.find('\n', last) - last);
  EXPECT_NE(line.find(": 2 worker(s); left "), std::string::npos) << out;
  EXPECT_NE(line.find("(memory)"), std::string::npos) << out;
  EXPECT_NE(out.find("test accuracy"), std::string::npos) << out;
}

TEST(ElasticOverShm, AKilledWorkerIsReplacedAndTheReplacementJoinsTheRun) {
  const auto out = run_and_kill_one("--train.epochs=3 --elastic.max_restarts=1");
  fs::remove_all(fs::temp_directory_path() / ("tessera-elastic-shm-" + std::to_string(::getpid())));
  EXPECT_NE(out.find("elastic: worker n0.w1 left: rank 1 was killed by signal 9 (SIGKILL); the "
                     "others go on; starting n0.w1.r1 to join them (0 restart(s) left)"),
            std::string::npos)
      << out;
  // The replacement enters in the regroup after the failure when it is ready by then, or at a
  // step boundary after it: either way the run ends at three workers again.
  std::istringstream lines(out);
  bool rejoined = false;
  for (std::string line; std::getline(lines, line);) {
    rejoined = rejoined || (line.find(": 3 worker(s); left ") != std::string::npos &&
                            line.find("joined n0.w1.r1; ") != std::string::npos);
  }
  EXPECT_TRUE(rejoined) << out;
  EXPECT_NE(out.find("test accuracy"), std::string::npos) << out;
}

// Two workers and min_workers = 2: once one is killed, the survivor waits join_timeout for a
// newcomer, then stops with an error naming the checkpoint it wrote of the state it held; the
// run resumes from it on one worker.
TEST(ElasticOverShm, BelowMinWorkersTheSurvivorStopsWithACheckpointAndTheRunResumesFromIt) {
  const fs::path dir =
      fs::temp_directory_path() / ("tessera-elastic-shm-stop-" + std::to_string(::getpid()));
  const auto checkpoints = dir / "checkpoints";
  const std::string limits =
      " --train.epochs=1 --train.max_steps=600 --train.checkpoint_dir=" + checkpoints.string();
  const auto out =
      run_and_kill_one(limits + " --elastic.min_workers=2 --elastic.join_timeout=1s", 2, true, dir);
  for (const auto& part : std::vector<std::string>{
           "tessera: error: elastic: the run stopped after step ", "1 worker(s) left (gone: n0.w1)",
           "min_workers = 2", "join_timeout = 1 s", "the survivors' state after step ",
           "is in " + (checkpoints / "step-").string(), "go on with `tessera train --resume`"}) {
    EXPECT_NE(out.find(part), std::string::npos) << part << "\n" << out;
  }
  EXPECT_EQ(out.find(".cpp"), std::string::npos) << out;
  ASSERT_EQ(tessera_checkpoints(checkpoints), 1U) << out;

  const std::string resume = std::string(TESSERA_CLI_PATH) + " train -n 1" + job_flags(dir) +
                             limits + " --resume > " + (dir / "resumed.txt").string() + " 2>&1";
  EXPECT_EQ(std::system(resume.c_str()), 0) << read_file(dir / "resumed.txt");
  EXPECT_NE(read_file(dir / "resumed.txt").find("test accuracy"), std::string::npos)
      << read_file(dir / "resumed.txt");
  fs::remove_all(dir);
}

}  // namespace
