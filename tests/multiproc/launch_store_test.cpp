// `tessera launch --store etcd://...` and `--store file://...`: the real launcher and workers
// meeting in a real etcd (started here on free ports) or a folder, each job in its own
// namespace, removed when the job ends; elastic jobs and several nodes over them; and the
// mistakes a user can make with --store, each a clear error within a bounded time.
#include <gtest/gtest.h>
#include <signal.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <set>
#include <string>
#include <thread>

#include "../multihost/shell_job.hpp"
#include "../unit/etcd_server.hpp"
#include "tessera/plugin/store.hpp"
#include "tessera/registry/registry.hpp"

namespace {

namespace fs = std::filesystem;
using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;
using tessera::store_test::EtcdServer;
using tessera::test::contains;
using tessera::test::process_with;
using tessera::test::read_text;
using tessera::test::ShellJob;

// A small synthetic run of two workers over shm: a few seconds on a loaded 2-core host.
const std::string kTrain = std::string(TESSERA_CLI_PATH) +
                           " train --runtime.transport=shm --runtime.timeout=60s"
                           " --train.dataset=synthetic --dataset.synthetic.samples=600"
                           " --dataset.synthetic.test_samples=200 --dataset.synthetic.features=32"
                           " --dataset.synthetic.classes=4 --model.mlp.layers=32,64,4"
                           " --train.optimizer=sgd --optimizer.sgd.momentum=0.9"
                           " --train.batch_size=16 --train.epochs=1 --train.lr=0.05"
                           " --train.progress=off --train.seed=5";

constexpr const char* kSharedToken = "TESSERA_STORE_TOKEN=0123456789abcdef0123456789abcdef";

class LaunchStore : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() /
           ("tessera-launch-store-" + std::to_string(::getpid()) + "-" +
            ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(dir_);
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }

  // `env ENV tessera launch ARGS` in the background, stdout and stderr to NAME.out / NAME.err.
  [[nodiscard]] std::string command(const std::string& name, const std::string& args,
                                    const std::string& env = "") const {
    const auto base = (dir_ / name).string();
    return "env " + env + " " + TESSERA_CLI_PATH + " launch " + args + " > " + base + ".out 2> " +
           base + ".err";
  }
  // Node `rank` of a two-node job meeting in `store`: `tessera launch --nnodes 2 ... ARGS`,
  // its output in node<rank>.out / .err.
  [[nodiscard]] std::string node(int rank, const std::string& store, const std::string& args,
                                 const std::string& env = kSharedToken) const {
    return command("node" + std::to_string(rank),
                   "--nnodes 2 --node-rank " + std::to_string(rank) + " --timeout 60s --store " +
                       store + " " + args,
                   env);
  }
  // Runs it to its end (killed after `limit`); returns the exit code.
  int run(const std::string& name, const std::string& args, std::chrono::seconds limit = 120s,
          const std::string& env = "") const {
    ShellJob job(command(name, args, env));
    return job.wait(limit);
  }
  [[nodiscard]] std::string out(const std::string& name) const {
    return read_text(dir_ / (name + ".out"));
  }
  [[nodiscard]] std::string err(const std::string& name) const {
    return read_text(dir_ / (name + ".err"));
  }

  // Every key in the etcd, job namespaces included (prefix "").
  static std::vector<std::pair<std::string, std::string>> etcd_keys(const EtcdServer& etcd) {
    tessera::PluginRegistry registry;
    registry.scan_directory(TESSERA_PLUGIN_DIR);
    const auto defaults = registry.default_options(tessera::PluginKind::store, "etcd");
    auto values = defaults.values();
    values["endpoints"] = etcd.endpoint();
    values["prefix"] = "";
    values["timeout"] = "10s";
    const auto store = registry.create<tessera::Store>(
        "etcd", tessera::Options(defaults.section(), defaults.specs(), values));
    return store->list("");
  }

  fs::path dir_;
};

// ---- tcp, served by the job's launcher --------------------------------------------------------

// The launcher that serves an elastic job's tcp store keeps it until the workers another launcher
// started (--join) have left: their lease renewals and the revoke at their end are answered. It
// once stopped serving as soon as its own workers finished, and a joiner still running then
// retried the vanished store for its `timeout` (300 s) before it could exit.
TEST_F(LaunchStore, TheJobsLauncherServesItsStoreUntilTheJoinersWorkersHaveLeft) {
  const std::string store = "127.0.0.1:" + std::to_string(EtcdServer::free_port());
  ShellJob job(command("job",
                       "--elastic -n 1 --timeout 60s --store " + store + " -- " +
                           TESSERA_TEST_WORKER + " leased_stop none 1500",
                       kSharedToken));
  // The joiner dials once the job's store answers (its launcher retries until then).
  std::this_thread::sleep_for(300ms);
  const auto started = Clock::now();
  ShellJob joiner(command("joiner",
                          "--elastic --join -n 1 --timeout 60s --store " + store + " -- " +
                              TESSERA_TEST_WORKER + " leased_stop none 4000",
                          kSharedToken));
  EXPECT_EQ(joiner.wait(30s), 0) << err("joiner") << out("joiner");
  const auto joiner_done = Clock::now() - started;
  EXPECT_EQ(job.wait(30s), 0) << err("job");
  EXPECT_TRUE(contains(out("joiner"), " holds its lease")) << out("joiner");
  // 4 s of the joiner's run, its launcher's start and exit: far below the store's 300 s.
  EXPECT_LT(joiner_done, 15s) << err("joiner");
}

// Once a worker finished the run, a store that no longer answers holds no lease for anyone: a
// worker of a --join launcher still entering when the job ended (its store gone with it) is
// stopped after the grace period, as one whose lease ended, instead of being asked after
// forever (join2/shm/ddp hung so, its launcher polling the vanished store).
TEST_F(LaunchStore, AJoinersWorkerLeftBehindAStoreThatIsGoneIsStoppedOnceTheRunFinished) {
  const std::string gone = "127.0.0.1:" + std::to_string(EtcdServer::free_port());
  const auto started = Clock::now();
  // Rank 0 exits 0 at once (it finished the run); rank 1 waits to be stopped (30 s at most).
  EXPECT_EQ(run("joiner",
                "--elastic --join -n 2 --grace 500ms --timeout 60s --store " + gone + " -- " +
                    TESSERA_TEST_WORKER + " exit 0 0",
                60s, kSharedToken),
            0)
      << err("joiner");
  EXPECT_LT(Clock::now() - started, 15s) << err("joiner");
  const auto text = err("joiner");
  const std::string stopping = "lost its lease and the run finished without it; stopping it";
  const auto first = text.find(stopping);
  EXPECT_NE(first, std::string::npos) << text;
  EXPECT_EQ(text.find(stopping, first + 1), std::string::npos) << "stopped twice:\n" << text;
}

// ---- etcd ---------------------------------------------------------------------------------

TEST_F(LaunchStore, TwoWorkersTrainThroughEtcdWithTheConfigsDefaultStore) {
  EtcdServer etcd;
  // runtime.store is left at its default: the workers take the launcher's store.
  ASSERT_EQ(run("job", "-n 2 --timeout 110s --store etcd://" + etcd.endpoint() + " -- " + kTrain),
            0)
      << err("job");
  EXPECT_TRUE(contains(out("job"), "test accuracy")) << out("job");
  // The job's keys went with it.
  EXPECT_TRUE(etcd_keys(etcd).empty()) << etcd_keys(etcd).front().first;
}

TEST_F(LaunchStore, EveryRankMeetsInItsOwnJobsNamespaceOfOneEtcd) {
  EtcdServer etcd;
  // Two jobs at once on one etcd, each counting its ranks under the same key names: they
  // agree on 2 arrivals each only if their keys never mix.
  const auto args = "-n 2 --timeout 60s --store etcd://" + etcd.endpoint() + " -- " +
                    TESSERA_TEST_WORKER + " rendezvous";
  ShellJob first(command("first", args));
  ShellJob second(command("second", args));
  ASSERT_EQ(first.wait(70s), 0) << err("first");
  ASSERT_EQ(second.wait(70s), 0) << err("second");
  for (const std::string job : {"first", "second"}) {
    EXPECT_TRUE(contains(out(job), "[rank 0] rank 0 of 2 (local 0 of 2) agreed on 2 arrivals"))
        << out(job);
    EXPECT_TRUE(contains(out(job), "[rank 1] rank 1 of 2 (local 1 of 2) agreed on 2 arrivals"))
        << out(job);
    EXPECT_TRUE(contains(out(job), "[rank 0] store etcd://" + etcd.endpoint() + "/tessera/"))
        << out(job);
  }
  EXPECT_TRUE(etcd_keys(etcd).empty());
}

TEST_F(LaunchStore, AJobIdNamesTheNamespaceUnderTheUrlsPrefix) {
  EtcdServer etcd;
  ASSERT_EQ(run("job", "-n 1 --job-id run-7 --store etcd://" + etcd.endpoint() + "/team-a -- " +
                           TESSERA_TEST_WORKER + " rendezvous"),
            0)
      << err("job");
  EXPECT_TRUE(contains(out("job"), "store etcd://" + etcd.endpoint() + "/team-a/run-7/\n"))
      << out("job");
}

TEST_F(LaunchStore, AWorkerWhoseConfigNamesAnotherStoreIsRefusedNamingBoth) {
  EtcdServer etcd;
  const auto code =
      run("job", "-n 2 --timeout 60s --store etcd://" + etcd.endpoint() + " -- " + kTrain +
                     " --runtime.store=file --store.file.path=" + (dir_ / "elsewhere").string());
  EXPECT_EQ(code, 2) << err("job");
  EXPECT_TRUE(contains(err("job"),
                       "[runtime] store = file (flag --runtime.store) but the launcher gives this "
                       "worker the etcd store etcd://" +
                           etcd.endpoint() + "/tessera/"))
      << err("job");
  EXPECT_TRUE(contains(err("job"), "remove runtime.store")) << err("job");
}

TEST_F(LaunchStore, AWorkerWhoseConfigPointsTheSameStoreElsewhereIsRefusedNamingBoth) {
  EtcdServer etcd;
  const auto code = run("job", "-n 1 --store etcd://" + etcd.endpoint() + " -- " + kTrain +
                                   " --runtime.store=etcd --store.etcd.endpoints=10.9.9.9:2379");
  EXPECT_EQ(code, 2) << err("job");
  EXPECT_TRUE(contains(err("job"),
                       "[store.etcd] endpoints = 10.9.9.9:2379 (flag "
                       "--store.etcd.endpoints) but the launcher gives this worker "
                       "the etcd store"))
      << err("job");
}

std::size_t lines_of(const fs::path& file) {
  std::ifstream in(file);
  std::size_t n = 0;
  for (std::string line; std::getline(in, line);) ++n;
  return n;
}

TEST_F(LaunchStore, AnElasticJobOverEtcdGoesOnWithoutAKilledWorker) {
  EtcdServer etcd;
  // Only this job's workers carry the tag, so the kill finds no other process.
  const std::string tag = "LAUNCH_STORE_ELASTIC_JOB=" + std::to_string(::getpid());
  const auto metrics = dir_ / "metrics.jsonl";
  ShellJob job(command(
      "job",
      "-n 3 --elastic --timeout 240s --store etcd://" + etcd.endpoint() + " -- " +
          TESSERA_CLI_PATH +
          " train --runtime.transport=shm --runtime.timeout=60s --elastic.enabled=true"
          " --train.strategy=ddp --elastic.heartbeat=100ms"
          " --elastic.failure_timeout=2s --train.dataset=synthetic"
          " --dataset.synthetic.samples=30000 --dataset.synthetic.test_samples=500"
          " --dataset.synthetic.features=64 --dataset.synthetic.classes=4"
          " --model.mlp.layers=64,256,256,4 --train.optimizer=sgd --optimizer.sgd.momentum=0.9"
          " --train.batch_size=16 --train.lr=0.02 --train.progress=off --train.seed=5"
          " --train.epochs=1 --train.metrics_file=" +
          metrics.string(),
      tag));
  const auto give_up = Clock::now() + 150s;
  pid_t victim = -1;
  while (Clock::now() < give_up) {
    if (lines_of(metrics) >= 50) {
      victim = process_with({"TESSERA_WORKER_ID=n0.w1", tag});
      if (victim > 0) break;
    }
    std::this_thread::sleep_for(20ms);
  }
  ASSERT_GT(victim, 0) << "the job never reached step 50\n" << err("job");
  ASSERT_EQ(::kill(victim, SIGKILL), 0);
  ASSERT_EQ(job.wait(250s), 0) << err("job");
  const auto text = out("job") + err("job");
  EXPECT_TRUE(contains(text, "elastic: worker n0.w1 left: rank 1 was killed by signal 9")) << text;
  EXPECT_TRUE(contains(text, " generation 2: 2 worker(s); left n0.w1; joined -; failed at step"))
      << text;
  EXPECT_TRUE(contains(text, "test accuracy")) << text;
  EXPECT_TRUE(etcd_keys(etcd).empty());
}

TEST_F(LaunchStore, TwoNodesFormOneWorldThroughEtcd) {
  EtcdServer etcd;
  // A job id instead of a token: every node derives the same namespace from it.
  const auto args =
      std::string("--job-id nodes-test -n 2 -- ") + TESSERA_TEST_WORKER + " rendezvous";
  const auto store = "etcd://" + etcd.endpoint();
  ShellJob second(node(1, store, args, "-u TESSERA_STORE_TOKEN"));
  ShellJob first(node(0, store, args, "-u TESSERA_STORE_TOKEN"));
  ASSERT_EQ(first.wait(70s), 0) << err("node0");
  ASSERT_EQ(second.wait(70s), 0) << err("node1");
  EXPECT_TRUE(contains(out("node0"), "[rank 1] rank 1 of 4 (local 1 of 2) agreed on 4 arrivals"))
      << out("node0");
  EXPECT_TRUE(contains(out("node1"), "[rank 2] rank 2 of 4 (local 0 of 2) agreed on 4 arrivals"))
      << out("node1");
  EXPECT_TRUE(
      contains(out("node1"), "[rank 3] store etcd://" + etcd.endpoint() + "/tessera/nodes-test/"))
      << out("node1");
  EXPECT_TRUE(etcd_keys(etcd).empty());
}

TEST_F(LaunchStore, AFailureOnOneNodeStopsTheOtherThroughEtcd) {
  EtcdServer etcd;
  // Rank 3 (node 1) exits with 3; every other rank would wait 30 s unless stopped.
  const auto args = std::string("-n 2 -- ") + TESSERA_TEST_WORKER + " exit 3 3";
  const auto started = Clock::now();
  ShellJob first(node(0, "etcd://" + etcd.endpoint(), args));
  ShellJob second(node(1, "etcd://" + etcd.endpoint(), args));
  EXPECT_EQ(second.wait(50s), 3) << err("node1");
  EXPECT_EQ(first.wait(50s), 3) << err("node0");
  EXPECT_LT(Clock::now() - started, 20s);
  EXPECT_TRUE(contains(err("node0"), "node 1: rank 3 exited with code 3")) << err("node0");
}

// A second job given the running job's id would meet in its namespace: it is refused before
// any of its workers starts, and the first job runs on untouched; once that job ended, the id
// is free for the next one.
TEST_F(LaunchStore, AJobIdInUseIsRefusedBeforeAnyWorkerStartsAndFreeOnceThatJobEnded) {
  EtcdServer etcd;
  const auto store = " --job-id shared-id --store etcd://" + etcd.endpoint();
  // Its workers run 8 s and exit 0: long enough for the refusals below on a loaded host.
  ShellJob first(command(
      "first", "-n 2" + store + " -- " + TESSERA_TEST_WORKER + " elastic no-such-worker 8000"));
  const auto give_up = Clock::now() + 20s;
  while (Clock::now() < give_up && !(contains(out("first"), "worker n0.w0 ran") &&
                                     contains(out("first"), "worker n0.w1 ran")))
    std::this_thread::sleep_for(20ms);  // the poll's period: nothing else says the job runs
  ASSERT_TRUE(contains(out("first"), "worker n0.w1 ran")) << err("first");

  // An elastic job and a plain one alike.
  for (const std::string elastic : {"", " --elastic"}) {
    ASSERT_EQ(
        run("second", "-n 1" + elastic + store + " -- " + TESSERA_TEST_WORKER + " print", 20s), 2)
        << err("second");
    EXPECT_TRUE(contains(err("second"), "job id 'shared-id' is in use on etcd://" +
                                            etcd.endpoint() + "/tessera/shared-id/"))
        << err("second");
    EXPECT_TRUE(contains(err("second"), "give this job another --job-id")) << err("second");
    EXPECT_EQ(out("second"), "") << "a worker of the refused job ran";
  }
  // The first job was not disturbed: every worker of it ran to its end.
  EXPECT_EQ(first.wait(20s), 0) << err("first");
  EXPECT_EQ(err("first"), "");

  ASSERT_EQ(run("third", "-n 1" + store + " -- " + TESSERA_TEST_WORKER + " print", 20s), 0)
      << err("third");
  EXPECT_TRUE(contains(out("third"), "first line of rank 0")) << out("third");
}

// etcd dies while an elastic job runs: one worker already finished (exit 0), the last one
// then fails. Without the store nobody can regroup or finish, so the job fails, naming the
// store, instead of counting the finished worker as the job's success.
TEST_F(LaunchStore, AnElasticJobThatLostItsStoreFailsNamingIt) {
  EtcdServer etcd;
  const auto go = dir_ / "go";
  ShellJob job(
      command("job", "-n 2 --elastic --job-id lost-store --store-timeout 2s --store etcd://" +
                         etcd.endpoint() + " -- " + TESSERA_TEST_WORKER + " last_fails n0.w1 3 " +
                         go.string()));
  const auto give_up = Clock::now() + 20s;
  while (Clock::now() < give_up && !contains(out("job"), "[rank 1] ready"))
    std::this_thread::sleep_for(20ms);  // the poll's period: nothing else says the job runs
  ASSERT_TRUE(contains(out("job"), "[rank 1] ready")) << err("job");
  etcd.kill_now();
  std::ofstream(go) << "go\n";
  EXPECT_EQ(job.wait(20s), 3) << err("job");
  EXPECT_TRUE(contains(err("job"),
                       "tessera launch: rank 1 exited with code 3 and the job's store "
                       "etcd://" +
                           etcd.endpoint() +
                           "/tessera/lost-store/ does not "
                           "answer"))
      << err("job");
  EXPECT_TRUE(contains(err("job"), "an elastic job cannot go on without it")) << err("job");
}

// The worker's side of a lost store: an elastic worker whose store does not answer ends with an
// error that names the store and the newest checkpoint to go on from with --resume.
TEST_F(LaunchStore, AnElasticWorkerWithoutItsStoreNamesItAndTheCheckpointToResumeFrom) {
  const auto checkpoints = dir_ / "checkpoints";
  const auto flags = " --train.checkpoint_dir=" + checkpoints.string();
  // A checkpoint of step 3, written by a run of its own.
  ShellJob first("env -u TESSERA_STORE_URL " + kTrain + flags + " --train.max_steps=3 > " +
                 (dir_ / "first.out").string() + " 2>&1");
  ASSERT_EQ(first.wait(60s), 0) << read_text(dir_ / "first.out");
  // A worker as a launcher starts it, given an etcd that is gone (nothing listens on port 1).
  const std::string gone = "etcd://127.0.0.1:1/tessera/lost-store/";
  ShellJob worker(
      "env TESSERA_RANK=0 TESSERA_WORLD_SIZE=1 TESSERA_LOCAL_RANK=0 "
      "TESSERA_LOCAL_WORLD_SIZE=1 TESSERA_NODE_RANK=0 TESSERA_NNODES=1 "
      "TESSERA_WORKER_ID=n0.w0 TESSERA_STORE_URL=" +
      gone + " " + kTrain + flags +
      " --elastic.enabled=true --elastic.failure_timeout=2s --store.etcd.timeout=1s"
      " --resume > " +
      (dir_ / "worker.out").string() + " 2>&1");
  EXPECT_EQ(worker.wait(30s), 1);
  const auto text = read_text(dir_ / "worker.out");
  EXPECT_TRUE(contains(text, "tessera: error: elastic: lost the job's store " + gone + " ("))
      << text;
  EXPECT_TRUE(contains(text, "the newest checkpoint is " +
                                 (checkpoints / "step-000000000003").string() +
                                 " (step 3): once the store runs again, go on from it with "
                                 "`tessera train --resume`"))
      << text;
}

TEST_F(LaunchStore, AJoiningLauncherOpensTheRunningJobsNamespaceAndLeavesItThere) {
  EtcdServer etcd;
  // The job's own launcher removes its namespace at the end; one that joins it must not.
  ASSERT_EQ(run("join",
                "--elastic --join --job-id running-job -n 1 --store etcd://" + etcd.endpoint() +
                    " -- " + TESSERA_TEST_WORKER + " rendezvous",
                60s, "-u TESSERA_STORE_TOKEN"),
            0)
      << err("join");
  EXPECT_TRUE(
      contains(out("join"), "[rank 0] store etcd://" + etcd.endpoint() + "/tessera/running-job/"))
      << out("join");
  const auto keys = etcd_keys(etcd);
  ASSERT_FALSE(keys.empty());
  for (const auto& [key, value] : keys) EXPECT_TRUE(key.starts_with("tessera/running-job/")) << key;
}

// ---- file ---------------------------------------------------------------------------------

TEST_F(LaunchStore, TwoWorkersTrainThroughAFileStoreWithATcpConfig) {
  const auto shared = dir_ / "rendezvous";
  // runtime.store = tcp with no server of its own means "the launcher's store": here a folder.
  ASSERT_EQ(run("job", "-n 2 --timeout 110s --store file://" + shared.string() + " -- " + kTrain +
                           " --runtime.store=tcp"),
            0)
      << err("job");
  EXPECT_TRUE(contains(out("job"), "test accuracy")) << out("job");
  ASSERT_TRUE(fs::is_directory(shared));
  EXPECT_TRUE(fs::is_empty(shared)) << fs::directory_iterator(shared)->path();
}

TEST_F(LaunchStore, TwoNodesFormOneWorldThroughAFolder) {
  const auto shared = dir_ / "rendezvous";
  const auto args = std::string("-n 1 -- ") + TESSERA_TEST_WORKER + " rendezvous";
  ShellJob first(node(0, "file://" + shared.string(), args));
  ShellJob second(node(1, "file://" + shared.string(), args));
  ASSERT_EQ(first.wait(70s), 0) << err("node0");
  ASSERT_EQ(second.wait(70s), 0) << err("node1");
  EXPECT_TRUE(contains(out("node0"), "[rank 0] rank 0 of 2 (local 0 of 1) agreed on 2 arrivals"))
      << out("node0");
  EXPECT_TRUE(contains(out("node1"), "[rank 1] rank 1 of 2 (local 0 of 1) agreed on 2 arrivals"))
      << out("node1");
  EXPECT_TRUE(contains(out("node1"), "[rank 1] store file://" + shared.string() + "/"))
      << out("node1");
}

// A node of an elastic job dies whole (its launcher and its worker, as with a host that goes
// down): the other node's worker goes on alone, and its launcher, node 0, ends the job soon after
// the run ends instead of waiting finish_wait (60 s) for the dead node's report. 60000 samples:
// 1875 steps of a second or two, so that the kill at step 20 lands inside the run.
TEST_F(LaunchStore, AnElasticJobEndsPromptlyWithoutANodeThatDiedWhole) {
  const auto shared = dir_ / "rendezvous";
  const auto metrics = dir_ / "metrics.jsonl";
  const std::string tag = "LAUNCH_STORE_NODE_KILL=" + std::to_string(::getpid());
  const auto args = std::string("-n 1 --elastic --min-workers 1 -- ") + TESSERA_CLI_PATH +
                    " train --runtime.transport=shm --runtime.timeout=60s --elastic.enabled=true"
                    " --train.strategy=ddp --elastic.heartbeat=100ms"
                    " --elastic.failure_timeout=2s --train.dataset=synthetic"
                    " --dataset.synthetic.samples=60000 --dataset.synthetic.test_samples=200"
                    " --dataset.synthetic.features=32 --dataset.synthetic.classes=4"
                    " --model.mlp.layers=32,64,4 --train.optimizer=sgd --optimizer.sgd.momentum=0.9"
                    " --train.batch_size=16 --train.lr=0.02 --train.progress=off --train.seed=5"
                    " --train.epochs=1 --train.metrics_file=" +
                    metrics.string();
  const auto store = "file://" + shared.string();
  ShellJob first(node(0, store, args, std::string(kSharedToken) + " " + tag + "-n0"));
  ShellJob second(node(1, store, args, std::string(kSharedToken) + " " + tag + "-n1"));
  const auto give_up = Clock::now() + 120s;
  pid_t worker = -1;
  while (Clock::now() < give_up) {
    if (lines_of(metrics) >= 20) {
      worker = process_with({"TESSERA_WORKER_ID=n1.w0", tag + "-n1"});
      if (worker > 0) break;
    }
    std::this_thread::sleep_for(20ms);
  }
  ASSERT_GT(worker, 0) << "the job never reached step 20\n" << err("node0") << err("node1");
  // Stopped first, so that neither sees the other die, then killed.
  second.signal_group(SIGSTOP);
  ASSERT_EQ(::kill(worker, SIGSTOP), 0);
  second.signal_group(SIGKILL);
  ASSERT_EQ(::kill(worker, SIGKILL), 0);
  const auto killed = Clock::now();
  EXPECT_EQ(second.wait(10s), -1);
  ASSERT_EQ(first.wait(100s), 0) << err("node0");
  const auto text = out("node0") + err("node0");
  EXPECT_TRUE(contains(text, "left n1.w0")) << text;
  EXPECT_TRUE(contains(text, "test accuracy")) << text;
  EXPECT_TRUE(contains(text, "elastic: node(s) 1 left the job: none of their workers is alive"))
      << text;
  // The rest of the run alone takes seconds; waiting out finish_wait would take a minute.
  EXPECT_LT(Clock::now() - killed, 50s) << text;
}

// ---- mistakes -----------------------------------------------------------------------------

TEST_F(LaunchStore, AnUnknownSchemeIsAUsageErrorListingTheForms) {
  EXPECT_EQ(run("job", "-n 1 --store redis://127.0.0.1:6379 -- " TESSERA_TEST_WORKER " print"), 2);
  EXPECT_TRUE(contains(err("job"), "--store redis://127.0.0.1:6379: unknown scheme 'redis'"))
      << err("job");
  EXPECT_TRUE(contains(err("job"), "etcd://HOST:PORT")) << err("job");
}

TEST_F(LaunchStore, AMalformedEtcdUrlIsAUsageError) {
  EXPECT_EQ(run("job", "-n 1 --store etcd://127.0.0.1:http -- " TESSERA_TEST_WORKER " print"), 2);
  EXPECT_TRUE(contains(err("job"), "--store etcd://127.0.0.1:http: '127.0.0.1:http' has no port"))
      << err("job");
  EXPECT_EQ(run("empty", "-n 1 --store etcd://,127.0.0.1:1 -- " TESSERA_TEST_WORKER " print"), 2);
  EXPECT_TRUE(contains(err("empty"), "has no host")) << err("empty");
}

TEST_F(LaunchStore, ARelativeFilePathIsAUsageError) {
  EXPECT_EQ(run("job", "-n 1 --store file://shared/rdzv -- " TESSERA_TEST_WORKER " print"), 2);
  EXPECT_TRUE(contains(err("job"),
                       "--store file://shared/rdzv: a file store URL takes an "
                       "absolute path"))
      << err("job");
}

TEST_F(LaunchStore, AnEtcdThatDoesNotAnswerFailsWithinTheStoreTimeoutNamingTheFlag) {
  std::string dead;
  {
    EtcdServer gone;  // a port where etcd ran and nothing listens now
    dead = gone.endpoint();
  }
  const auto started = Clock::now();
  const auto code = run(
      "job",
      "-n 1 --store-timeout 2s --store etcd://" + dead + " -- " + TESSERA_TEST_WORKER + " print",
      60s);
  EXPECT_EQ(code, 1) << err("job");
  EXPECT_LT(Clock::now() - started, 15s);
  EXPECT_TRUE(contains(err("job"), "launch: --store etcd://" + dead + ": the job's etcd store at "))
      << err("job");
  EXPECT_TRUE(contains(err("job"), "does not answer")) << err("job");
  EXPECT_TRUE(out("job").empty()) << "a worker ran: " << out("job");
}

TEST_F(LaunchStore, AFolderThatCannotBeMadeIsAClearError) {
  std::ofstream(dir_ / "a-file") << "not a folder";
  const auto code = run("job", "-n 1 --store file://" + (dir_ / "a-file").string() + " -- " +
                                   TESSERA_TEST_WORKER + " print");
  EXPECT_EQ(code, 2) << err("job");
  EXPECT_TRUE(contains(err("job"), "launch: --store file://" + (dir_ / "a-file").string() + ": "))
      << err("job");
}

TEST_F(LaunchStore, JobIdsAndBindFlagsOutsideTheirStoresAreRefused) {
  EXPECT_EQ(
      run("bad_id",
          "-n 1 --job-id ../up --store etcd://127.0.0.1:2379 -- " TESSERA_TEST_WORKER " print"),
      2);
  EXPECT_TRUE(contains(err("bad_id"), "--job-id '../up' must be 1-64 letters")) << err("bad_id");
  EXPECT_EQ(run("tcp_id", "-n 1 --job-id x -- " TESSERA_TEST_WORKER " print"), 2);
  EXPECT_TRUE(contains(err("tcp_id"), "--job-id names the job's keys in an etcd or file store"))
      << err("tcp_id");
  EXPECT_EQ(
      run("bind", "-n 1 --store-port 1234 --store file:///tmp/x -- " TESSERA_TEST_WORKER " print"),
      2);
  EXPECT_TRUE(contains(err("bind"), "nothing is served")) << err("bind");
}

TEST_F(LaunchStore, SeveralNodesOverEtcdNeedASharedTokenOrJobId) {
  EXPECT_EQ(
      run("job",
          "--nnodes 2 --node-rank 0 --store etcd://127.0.0.1:2379 -n 1 -- " TESSERA_TEST_WORKER
          " print",
          30s, "-u TESSERA_STORE_TOKEN"),
      2);
  EXPECT_TRUE(contains(err("job"), "or give every node the same --job-id")) << err("job");
}

}  // namespace
