// `tessera launch` end to end: the real binary, real worker processes, real signals.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <poll.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <fstream>
#include <functional>
#include <iterator>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

namespace {

using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;

struct Outcome {
  int exit_code = -1;  // -1: the launcher itself was killed by a signal
  std::string out;
  std::string err;
  Clock::duration elapsed{};
};

// Runs `tessera launch ARGS...`; `on_output` may act on the output so far (send a signal...)
// and is called after every read. Kills the launcher if it is still running after 30 s.
Outcome launch(const std::vector<std::string>& args,
               const std::function<void(pid_t, const std::string&)>& on_output = {}) {
  std::vector<std::string> words{TESSERA_CLI_PATH, "launch"};
  words.insert(words.end(), args.begin(), args.end());
  std::vector<char*> argv;
  for (auto& w : words) argv.push_back(w.data());
  argv.push_back(nullptr);
  int out[2];
  int err[2];
  EXPECT_EQ(::pipe2(out, O_CLOEXEC), 0);
  EXPECT_EQ(::pipe2(err, O_CLOEXEC), 0);
  const auto start = Clock::now();
  const pid_t pid = ::fork();
  if (pid == 0) {
    ::dup2(out[1], 1);
    ::dup2(err[1], 2);
    ::execv(argv[0], argv.data());
    ::_exit(127);
  }
  ::close(out[1]);
  ::close(err[1]);
  Outcome outcome;
  const auto deadline = start + 30s;
  bool out_open = true;
  bool err_open = true;
  while ((out_open || err_open) && Clock::now() < deadline) {
    pollfd fds[2] = {{out_open ? out[0] : -1, POLLIN, 0}, {err_open ? err[0] : -1, POLLIN, 0}};
    ::poll(fds, 2, 100);
    char buffer[4096];
    for (int i = 0; i < 2; ++i) {
      if (fds[i].revents == 0) continue;
      const ssize_t n = ::read(fds[i].fd, buffer, sizeof buffer);
      if (n <= 0) {
        (i == 0 ? out_open : err_open) = false;
        continue;
      }
      (i == 0 ? outcome.out : outcome.err).append(buffer, static_cast<std::size_t>(n));
    }
    if (on_output) on_output(pid, outcome.out);
  }
  if (out_open || err_open) ::kill(pid, SIGKILL);
  int status = 0;
  ::waitpid(pid, &status, 0);
  outcome.elapsed = Clock::now() - start;
  ::close(out[0]);
  ::close(err[0]);
  outcome.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  return outcome;
}

std::vector<std::string> lines_of(const std::string& text) {
  std::vector<std::string> lines;
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);) lines.push_back(line);
  return lines;
}

bool contains(const std::string& text, const std::string& needle) {
  return text.find(needle) != std::string::npos;
}

TEST(Launch, EveryRankReachesTheStoreAndAgreesOnTheWorld) {
  const auto r = launch({"-n", "4", "--timeout", "60s", "--", TESSERA_TEST_WORKER, "rendezvous"});
  ASSERT_EQ(r.exit_code, 0) << r.out << r.err;
  for (int rank = 0; rank < 4; ++rank) {
    const auto expected = "[rank " + std::to_string(rank) + "] rank " + std::to_string(rank) +
                          " of 4 (local " + std::to_string(rank) + " of 4) agreed on 4 arrivals";
    EXPECT_TRUE(contains(r.out, expected + "\n")) << "missing: " << expected << "\n" << r.out;
  }
}

TEST(Launch, PrefixesEveryLineOfEveryRankOnItsOwnStream) {
  const auto r = launch({"-n", "2", "--", TESSERA_TEST_WORKER, "print"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  for (const auto& line : lines_of(r.out)) EXPECT_TRUE(line.starts_with("[rank ")) << line;
  for (const std::string rank : {"0", "1"}) {
    EXPECT_TRUE(contains(r.out, "[rank " + rank + "] first line of rank " + rank + "\n")) << r.out;
    EXPECT_TRUE(contains(r.out, "[rank " + rank + "] no newline at the end\n")) << r.out;
    EXPECT_TRUE(contains(r.err, "[rank " + rank + "] on stderr from rank " + rank + "\n")) << r.err;
  }
  EXPECT_EQ(lines_of(r.out).size(), 6u) << r.out;
}

TEST(Launch, Rank0OnlyOutputHidesTheOtherRanksStdoutButNotTheirStderr) {
  const auto r = launch({"-n", "3", "--rank0-only-output", "--", TESSERA_TEST_WORKER, "print"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_TRUE(contains(r.out, "[rank 0] first line of rank 0")) << r.out;
  EXPECT_FALSE(contains(r.out, "[rank 1]")) << r.out;
  EXPECT_FALSE(contains(r.out, "[rank 2]")) << r.out;
  EXPECT_TRUE(contains(r.err, "[rank 2] on stderr from rank 2")) << r.err;
}

TEST(Launch, AWorkerExitingWithACodeStopsTheJobAndIsNamed) {
  const auto r = launch({"-n", "3", "--", TESSERA_TEST_WORKER, "exit", "2", "3"});
  EXPECT_EQ(r.exit_code, 3) << r.err;
  EXPECT_TRUE(contains(r.err, "rank 2 exited with code 3")) << r.err;
  EXPECT_LT(r.elapsed, 10s);  // the others wait 30 s unless stopped
}

TEST(Launch, AWorkerKilledBySigkillIsNamedWithItsSignalAndTheOthersStopPromptly) {
  const auto r = launch({"-n", "3", "--", TESSERA_TEST_WORKER, "sigkill", "1"});
  EXPECT_EQ(r.exit_code, 128 + SIGKILL) << r.err;
  EXPECT_TRUE(contains(r.err, "rank 1 was killed by signal 9 (SIGKILL)")) << r.err;
  EXPECT_TRUE(contains(r.err, "stopping the other 2 ranks")) << r.err;
  EXPECT_LT(r.elapsed, 10s);
}

TEST(Launch, AWorkerIgnoringSigtermIsKilledAfterTheGracePeriod) {
  const auto r = launch(
      {"-n", "2", "--grace", "500ms", "--timeout", "3s", "--", TESSERA_TEST_WORKER, "stubborn"});
  EXPECT_EQ(r.exit_code, 124) << r.err;
  EXPECT_TRUE(contains(r.err, "timeout")) << r.err;
  EXPECT_LT(r.elapsed, 10s);
}

TEST(Launch, ForwardsSigtermToTheWorkersAndExitsNonZero) {
  bool sent = false;
  const auto r = launch(
      {"-n", "2", "--", TESSERA_TEST_WORKER, "sleep"}, [&](pid_t launcher, const std::string& out) {
        if (!sent && contains(out, "[rank 0] ready") && contains(out, "[rank 1] ready")) {
          ::kill(launcher, SIGTERM);
          sent = true;
        }
      });
  ASSERT_TRUE(sent) << r.out << r.err;
  EXPECT_EQ(r.exit_code, 128 + SIGTERM) << r.err;
  EXPECT_TRUE(contains(r.err, "killed by signal 15 (SIGTERM) after the launcher forwarded SIGTERM"))
      << r.err;
  EXPECT_LT(r.elapsed, 10s);
}

// The kernel's state letter of process `pid` (R, S, T, Z...), '?' when there is none.
char process_state(pid_t pid) {
  std::ifstream stat("/proc/" + std::to_string(pid) + "/stat");
  std::string text((std::istreambuf_iterator<char>(stat)), std::istreambuf_iterator<char>());
  const auto paren = text.rfind(')');
  return paren != std::string::npos && paren + 2 < text.size() ? text[paren + 2] : '?';
}

// Whether `pid` has exited and waits to be reaped by its parent.
bool is_zombie(pid_t pid) {
  return process_state(pid) == 'Z';
}

// The pid a worker printed as "stopping PID", once that worker is stopped; -1 before.
pid_t stopped_worker(const std::string& out) {
  const auto at = out.find("] stopping ");
  if (at == std::string::npos) return -1;
  const auto end = out.find('\n', at);
  if (end == std::string::npos) return -1;
  const pid_t pid = std::stoi(out.substr(at + 11, end - at - 11));
  return process_state(pid) == 'T' ? pid : -1;
}

TEST(Launch, BlamesTheRankThatFailedNotACrashBesideIt) {
  // Both ranks end while the launcher is stopped, so it finds both exits at once and cannot
  // tell their order: rank 1 exits with its error code, rank 0 (first in rank order) crashes,
  // as a survivor falling over on its way out does.
  const std::string go =
      ::testing::TempDir() + "tessera_crash_beside_" + std::to_string(::getpid());
  std::remove(go.c_str());
  bool released = false;
  const auto r = launch({"-n", "2", "--", TESSERA_TEST_WORKER, "crash_beside", "1", "3", go},
                        [&](pid_t launcher, const std::string& out) {
                          if (released) return;
                          std::vector<pid_t> workers;
                          for (const auto& line : lines_of(out)) {
                            const auto at = line.find("] ready ");
                            if (at != std::string::npos)
                              workers.push_back(std::stoi(line.substr(at + 8)));
                          }
                          if (workers.size() < 2) return;
                          ::kill(launcher, SIGSTOP);
                          std::ofstream(go) << "go\n";
                          for (int i = 0; i < 1000; ++i) {
                            if (is_zombie(workers[0]) && is_zombie(workers[1])) break;
                            std::this_thread::sleep_for(10ms);
                          }
                          ::kill(launcher, SIGCONT);
                          released = true;
                        });
  std::remove(go.c_str());
  ASSERT_TRUE(released) << r.out << r.err;
  EXPECT_EQ(r.exit_code, 3) << r.err;
  EXPECT_TRUE(contains(r.err, "tessera launch: rank 1 exited with code 3")) << r.err;
}

// A stopped process keeps a SIGTERM pending until it is continued: forwarding the signal alone
// left an elastic job (which does not stop the others when one ends) waiting for it forever.
TEST(Launch, SigtermEndsAnElasticJobWithAStoppedWorkerWithinTheGracePeriod) {
  Clock::time_point sent_at{};
  const auto r = launch({"-n", "2", "--elastic", "--grace", "500ms", "--timeout", "15s", "--",
                         TESSERA_TEST_WORKER, "stop_self", "1"},
                        [&](pid_t launcher, const std::string& out) {
                          if (sent_at != Clock::time_point{} || !contains(out, "[rank 0] ready") ||
                              stopped_worker(out) < 0)
                            return;
                          ::kill(launcher, SIGTERM);
                          sent_at = Clock::now();
                        });
  ASSERT_NE(sent_at, Clock::time_point{}) << r.out << r.err;
  EXPECT_EQ(r.exit_code, 128 + SIGTERM) << r.err;
  EXPECT_FALSE(contains(r.err, "timeout")) << r.err;
  // Each worker's end is reported as the job's stop, not as a departure the others outlive.
  EXPECT_TRUE(contains(r.err,
                       "was killed by signal 15 (SIGTERM); the job is being stopped (the "
                       "launcher forwarded SIGTERM)"))
      << r.err;
  EXPECT_FALSE(contains(r.err, "the others go on")) << r.err;
  // The grace period (0.5 s) and the launcher's last relay of output (1 s), with room for a
  // loaded machine: far below the job's own --timeout.
  EXPECT_LT(Clock::now() - sent_at, 5s) << r.err;
}

// The survivors of an elastic job finish the run without a worker whose lease ended while it
// was stopped; nothing else would ever end that worker, so the launcher stops it and the job
// succeeds instead of waiting for it (or running into --timeout).
TEST(Launch, AnElasticWorkerStoppedForeverIsEndedOnceTheRunFinishedWithoutIt) {
  const auto r = launch({"-n", "3", "--elastic", "--grace", "500ms", "--timeout", "15s", "--",
                         TESSERA_TEST_WORKER, "leased_stop", "n0.w1", "1500"});
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_TRUE(contains(r.out, "[rank 1] stopping ")) << r.out;
  EXPECT_TRUE(contains(r.err,
                       "tessera launch: elastic: worker n0.w1 (rank 1) lost its lease and the run "
                       "finished without it; stopping it\n"))
      << r.err;
  EXPECT_TRUE(contains(r.err,
                       "worker n0.w1 left: rank 1 was killed by signal 15 (SIGTERM); the run had "
                       "finished without it"))
      << r.err;
  // 1.5 s of run, then the grace period with the lease gone, then SIGTERM: far below 15 s.
  EXPECT_LT(r.elapsed, 10s) << r.err;
}

TEST(Launch, AProgramThatDoesNotExistIsAClearError) {
  const auto r = launch({"-n", "2", "--", "no-such-program-tessera-test"});
  EXPECT_NE(r.exit_code, 0);
  EXPECT_TRUE(contains(r.err, "'no-such-program-tessera-test' not found in PATH")) << r.err;
}

TEST(Launch, AnElasticJobReplacesAFailedWorkerWhileRestartsAreLeft) {
  const auto r = launch({"-n", "2", "--elastic", "--max-restarts", "1", "--timeout", "60s", "--",
                         TESSERA_TEST_WORKER, "elastic", "n0.w1", "1500"});
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_TRUE(contains(r.err,
                       "tessera launch: elastic: worker n0.w1 left: rank 1 exited with code 3; "
                       "the others go on; starting n0.w1.r1 to join them (0 restart(s) left)"))
      << r.err;
  EXPECT_TRUE(contains(r.out, "worker n0.w1.r1 ran")) << r.out;
  EXPECT_TRUE(contains(r.out, "worker n0.w0 ran")) << r.out;
}

TEST(Launch, AnElasticJobFailsOnlyWhenEveryWorkerFailed) {
  // Without restarts the survivor finishes: the job succeeds.
  const auto survived = launch({"-n", "2", "--elastic", "--timeout", "60s", "--",
                                TESSERA_TEST_WORKER, "elastic", "n0.w1", "200"});
  EXPECT_EQ(survived.exit_code, 0) << survived.err;
  EXPECT_TRUE(contains(survived.err,
                       "worker n0.w1 left: rank 1 exited with code 3; the others "
                       "go on\n"))
      << survived.err;
  const auto failed = launch({"-n", "1", "--elastic", "--timeout", "60s", "--", TESSERA_TEST_WORKER,
                              "elastic", "n0.w0", "0"});
  EXPECT_EQ(failed.exit_code, 3) << failed.err;
  EXPECT_TRUE(contains(failed.err,
                       "worker n0.w0 left: rank 0 exited with code 3; no worker of "
                       "this launcher is left"))
      << failed.err;
  EXPECT_TRUE(contains(failed.err, "every worker of the elastic job failed")) << failed.err;
}

TEST(Launch, ElasticFlagsOutsideAnElasticJobAreRefusedNamingWhatToAdd) {
  const auto restarts =
      launch({"-n", "1", "--max-restarts", "2", "--", TESSERA_TEST_WORKER, "print"});
  EXPECT_EQ(restarts.exit_code, 2) << restarts.err;
  EXPECT_TRUE(contains(restarts.err, "add --elastic")) << restarts.err;
  const auto workers =
      launch({"-n", "1", "--min-workers", "2", "--", TESSERA_TEST_WORKER, "print"});
  EXPECT_EQ(workers.exit_code, 2) << workers.err;
  EXPECT_TRUE(contains(workers.err, "add --elastic")) << workers.err;
  const auto join = launch({"-n", "1", "--elastic", "--join", "--", TESSERA_TEST_WORKER, "print"});
  EXPECT_EQ(join.exit_code, 2) << join.err;
  EXPECT_TRUE(contains(join.err, "--store HOST:PORT")) << join.err;
}

// "-n -1" was checked against the process limit before its sign ("-1 processes reach this
// user's process limit").
TEST(Launch, ACountBelowItsLeastValueIsAUsageErrorNamingTheFlag) {
  const std::vector<std::pair<std::vector<std::string>, std::string>> refused = {
      {{"-n", "-1"}, "launch: -n must be at least 1, not -1"},
      {{"-n0"}, "launch: -n must be at least 1, not 0"},
      {{"-n", "2", "--nnodes", "0"}, "launch: --nnodes must be at least 1, not 0"},
      {{"-n", "2", "--node-rank", "-3"}, "launch: --node-rank must be at least 0, not -3"},
      {{"-n", "2", "--elastic", "--max-restarts", "-1"},
       "launch: --max-restarts must be at least 0, not -1"},
      {{"-n", "2", "--store-port", "-80"}, "launch: --store-port must be at least 0, not -80"},
  };
  for (const auto& [flags, message] : refused) {
    auto args = flags;
    for (const auto* word : {"--", TESSERA_TEST_WORKER, "print"}) args.emplace_back(word);
    const auto r = launch(args);
    EXPECT_EQ(r.exit_code, 2) << r.err;
    EXPECT_TRUE(contains(r.err, message)) << r.err;
    EXPECT_FALSE(contains(r.err, "process limit")) << r.err;
  }
}

TEST(Launch, MissingProcessCountIsAUsageError) {
  const auto r = launch({"--", TESSERA_TEST_WORKER, "print"});
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_TRUE(contains(r.err, "-n N is required")) << r.err;
}

}  // namespace
