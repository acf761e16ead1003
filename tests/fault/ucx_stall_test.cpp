// The stall watchdog over ucx, as shm_stall_test.cpp holds it for shm: SIGSTOP one rank of a
// multi-process ucx group in the middle of a loop of all_reduces, and every survivor must fail
// within stall_timeout plus a few seconds (not the 300 s operation timeout), with a
// TransportError naming the stopped rank, the operation and its number; a rank merely busy
// (computing longer than stall_timeout between collectives) must not be taken for a stalled
// one. Over UCX_TLS=tcp (how ranks on different hosts talk) and UCX's default transports (on
// one host: shared memory), and with a buffer large enough for the mapped collectives.
#include <gtest/gtest.h>
#include <signal.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <ostream>
#include <regex>
#include <string>
#include <thread>

#include "fault_test_support.hpp"
#include "kill_harness.hpp"

namespace tessera {
namespace {

using namespace std::chrono_literals;
using kill_test::Clock;
using kill_test::kRanks;
using kill_test::kVictim;

constexpr std::chrono::milliseconds kStallTimeout = 2s * fault_test::kSanitizerSlowdown;

struct Case {
  const char* tls;  // UCX_TLS for every rank; nullptr: UCX's default
  std::size_t elements;
  const char* name;
};

void PrintTo(const Case& c, std::ostream* os) {
  *os << "UCX_TLS=" << (c.tls != nullptr ? c.tls : "(default)") << ", " << c.elements << " floats";
}

// Connects rank `rank` of kRanks over ucx (stall_timeout 2 s, timeout 300 s), all_reduces
// until one fails, and reports "failed <peer> <what>"; or, with `busy_rank` >= 0, that rank
// computes for 2 x stall_timeout before each of 3 all_reduces and everyone reports "done".
[[noreturn]] void stall_worker(const Case& c, const std::filesystem::path& folder, int rank,
                               int report_fd, int busy_rank) {
  int code = 1;
  auto report = [&](const std::string& line) {
    const std::string text = line + "\n";
    if (::write(report_fd, text.data(), text.size()) < 0) code = 3;
  };
  try {
    fault_test::use_ucx_tls(c.tls);
    const auto plugins = fault_test::load_worker_plugins(
        "ucx",
        {{"stall_timeout", std::to_string(kStallTimeout.count()) + "ms"}, {"timeout", "300s"}},
        folder);
    auto comm = plugins->transport->connect(plugins->store, rank, kRanks, 30s);
    std::vector<float> data(c.elements, 1.0f);
    for (int i = 0; i < 3; ++i) comm->all_reduce(view_of(std::span(data)), ReduceOp::sum)->wait();
    report("ready");
    if (busy_rank >= 0) {
      for (int i = 0; i < 3; ++i) {
        if (rank == busy_rank) {
          // Busy, not stopped: spin on the CPU well past stall_timeout.
          const auto until = Clock::now() + 2 * kStallTimeout;
          volatile double sink = 0;
          while (Clock::now() < until) sink = sink + 1.0;
        }
        comm->all_reduce(view_of(std::span(data)), ReduceOp::sum)->wait();
      }
      report("done");
      code = 0;
    } else {
      try {
        for (;;) comm->all_reduce(view_of(std::span(data)), ReduceOp::sum)->wait();
      } catch (const TransportError& e) {
        report("failed " + std::to_string(e.peer_rank().value_or(-1)) + " " + e.what());
        code = 0;
      }
    }
  } catch (const std::exception& e) {
    report(std::string("error ") + e.what());
  }
  ::_exit(code);
}

std::filesystem::path scratch(const std::string& name) {
  auto folder = std::filesystem::temp_directory_path() / (name + "_" + std::to_string(::getpid()));
  std::filesystem::remove_all(folder);
  return folder;
}

class UcxStallTest : public ::testing::TestWithParam<Case> {};

TEST_P(UcxStallTest, StoppedRankIsNamedWithTheOperationWithinStallTimeout) {
  const Case& c = GetParam();
  const auto folder = scratch(std::string("tessera_ucx_stall_") + c.name);
  {
    kill_test::Workers workers;
    workers.start([&](int rank, int report_fd) { stall_worker(c, folder, rank, report_fd, -1); });
    const auto pids = workers.pids();
    for (int rank = 0; rank < kRanks; ++rank)
      ASSERT_EQ(kill_test::read_line(workers.report_fd(rank), 60s), "ready");
    // Past "ready" every worker runs all_reduce after all_reduce: the stop lands inside one.
    ASSERT_EQ(::kill(pids[kVictim], SIGSTOP), 0);
    const auto stopped_at = Clock::now();
    for (int rank = 0; rank < kRanks; ++rank) {
      if (rank == kVictim) continue;
      // Without the watchdog nothing would arrive before the 300 s timeout: 30 s is plenty.
      const std::string line = kill_test::read_line(workers.report_fd(rank), 30s);
      const auto after = Clock::now() - stopped_at;
      // A few seconds of slack: on a loaded 2-core machine the survivors themselves may wait
      // for a core, and each survivor's abort handshake waits up to 1 s for the stopped rank.
      EXPECT_LT(after, kStallTimeout + 6s * fault_test::kSanitizerSlowdown)
          << "rank " << rank << ": " << line;
      EXPECT_GE(after, kStallTimeout - 100ms) << "rank " << rank << ": " << line;
      // The peer rank, the stopped rank named in the text, the operation and its number.
      EXPECT_TRUE(std::regex_search(
          line, std::regex("^failed 1 .*all_reduce.*rank 1 \\(pid [0-9]+\\) made no progress for "
                           "[0-9]+ ms \\(stall_timeout " +
                           std::to_string(kStallTimeout.count()) + " ms.* all_reduce #[0-9]+")))
          << "rank " << rank << ": " << line;
    }
    ::kill(pids[kVictim], SIGKILL);
  }
  std::filesystem::remove_all(folder);
}

TEST_P(UcxStallTest, BusyRankLongerThanStallTimeoutIsNotAStall) {
  const Case& c = GetParam();
  const auto folder = scratch(std::string("tessera_ucx_busy_") + c.name);
  {
    kill_test::Workers workers;
    workers.start(
        [&](int rank, int report_fd) { stall_worker(c, folder, rank, report_fd, kVictim); });
    for (int rank = 0; rank < kRanks; ++rank)
      ASSERT_EQ(kill_test::read_line(workers.report_fd(rank), 60s), "ready");
    for (int rank = 0; rank < kRanks; ++rank)
      // The busy rank computes 2 x stall_timeout before each of 3 all_reduces.
      EXPECT_EQ(kill_test::read_line(workers.report_fd(rank), 6 * kStallTimeout + 60s), "done")
          << "rank " << rank;
  }
  std::filesystem::remove_all(folder);
}

std::string case_name(const ::testing::TestParamInfo<Case>& param) {
  return param.param.name;
}

// 4 KiB: the message algorithms. 1 MiB (above small_size): over shared memory the mapped
// collectives, whose waits check the watchdog too; over tcp the segmented message algorithm.
INSTANTIATE_TEST_SUITE_P(Tcp, UcxStallTest,
                         ::testing::Values(Case{"tcp", 1024, "small"},
                                           Case{"tcp", std::size_t{1} << 18, "large"}),
                         case_name);
INSTANTIATE_TEST_SUITE_P(Default, UcxStallTest,
                         ::testing::Values(Case{nullptr, 1024, "small"},
                                           Case{nullptr, std::size_t{1} << 18, "mapped"}),
                         case_name);

}  // namespace
}  // namespace tessera
