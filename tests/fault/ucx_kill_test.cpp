// SIGKILL one rank of a multi-process ucx group in the middle of a loop of large all_reduces:
// every survivor's pending operation, and its next one, must fail within 5 s with a
// TransportError naming the killed rank. Parameterised over UCX_TLS, since how the death is
// noticed differs: UCX 1.13's shared-memory transports refuse peer error handling, so there the
// transport's check of peer pids on this host does it; over tcp UCX reports the broken
// connection itself (one case turns the pid check off to exercise exactly that path).
#include <gtest/gtest.h>
#include <poll.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <string>
#include <thread>
#include <vector>

#include "fault_test_support.hpp"
#include "tessera/communicator.hpp"
#include "tessera/error.hpp"
#include "tessera/transport.hpp"

namespace tessera {
namespace {

using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;

constexpr int kRanks = 3;
constexpr int kVictim = 1;
constexpr std::size_t kElements = std::size_t{4} << 20;  // 16 MiB of float per all_reduce

struct Case {
  const char* tls;                // UCX_TLS for every rank
  const char* liveness_interval;  // the transport's same-host pid check
  const char* name;
  const char* map_peers = "true";  // the transport's mapped collectives
};

struct Child {
  pid_t pid = -1;
  int report_fd = -1;  // the child writes "ready\n", then one result line
};

// What a worker reports: "ok <peer> <op> <peer> <op>" when its operations failed as they must.
[[noreturn]] void run_worker(const Case& c, int rank, const std::filesystem::path& folder,
                             int report_fd) {
  int code = 1;
  auto report = [&](const std::string& line) {
    const std::string text = line + "\n";
    if (::write(report_fd, text.data(), text.size()) < 0) code = 3;
  };
  try {
    ::setenv("UCX_TLS", c.tls, 1);
    PluginRegistry registry;
    registry.scan_directory(TESSERA_PLUGIN_DIR);
    auto store = registry.create<Store>(
        "file",
        fault_test::options_for(registry, PluginKind::store, "file", {{"path", folder.string()}}));
    auto transport = registry.create<Transport>(
        "ucx", fault_test::options_for(
                   registry, PluginKind::transport, "ucx",
                   {{"liveness_interval", c.liveness_interval}, {"map_peers", c.map_peers}}));
    auto comm = transport->connect(store, rank, kRanks, 30s);
    std::vector<float> data(kElements, 1.0f);
    for (int i = 0; i < 3; ++i) comm->all_reduce(view_of(std::span(data)), ReduceOp::sum)->wait();
    report("ready");
    try {
      for (;;) comm->all_reduce(view_of(std::span(data)), ReduceOp::sum)->wait(30s);
    } catch (const TransportError& first) {
      try {
        comm->all_reduce(view_of(std::span(data)), ReduceOp::sum)->wait(5s);
        report("next operation succeeded");
      } catch (const TransportError& next) {
        report("ok " + std::to_string(first.peer_rank().value_or(-1)) + " " + first.operation() +
               " " + std::to_string(next.peer_rank().value_or(-1)) + " " + next.operation());
        code = 0;
      }
    }
  } catch (const std::exception& e) {
    report(std::string("error ") + e.what());
  }
  ::_exit(code);
}

// Reads one line from fd, waiting at most `timeout`; empty on timeout or EOF.
std::string read_line(int fd, Clock::duration timeout) {
  std::string line;
  const auto deadline = Clock::now() + timeout;
  char c = 0;
  while (Clock::now() < deadline) {
    pollfd entry{fd, POLLIN, 0};
    const auto left =
        std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now());
    if (::poll(&entry, 1, static_cast<int>(std::max<long>(1, left.count()))) <= 0) continue;
    if (::read(fd, &c, 1) != 1) break;
    if (c == '\n') return line;
    line += c;
  }
  return line;
}

class UcxKillTest : public ::testing::TestWithParam<Case> {
 protected:
  void SetUp() override {
    folder_ = std::filesystem::temp_directory_path() /
              ("tessera_ucx_kill_" + std::to_string(::getpid()) + "_" + GetParam().name);
    std::filesystem::remove_all(folder_);
  }
  void TearDown() override {
    for (auto& child : children_) {
      if (child.pid > 0) {
        ::kill(child.pid, SIGKILL);
        ::waitpid(child.pid, nullptr, 0);
      }
      if (child.report_fd >= 0) ::close(child.report_fd);
    }
    std::filesystem::remove_all(folder_);
  }

  std::filesystem::path folder_;
  std::vector<Child> children_;
};

TEST_P(UcxKillTest, SurvivorsFailWithinFiveSecondsNamingTheKilledRank) {
  for (int rank = 0; rank < kRanks; ++rank) {
    int fds[2];
    ASSERT_EQ(::pipe(fds), 0);
    const pid_t pid = ::fork();
    ASSERT_GE(pid, 0);
    if (pid == 0) {
      ::close(fds[0]);
      run_worker(GetParam(), rank, folder_, fds[1]);
    }
    ::close(fds[1]);
    children_.push_back({pid, fds[0]});
  }
  for (const auto& child : children_) ASSERT_EQ(read_line(child.report_fd, 60s), "ready");
  std::this_thread::sleep_for(50ms);  // well inside the next all_reduce

  ASSERT_EQ(::kill(children_[kVictim].pid, SIGKILL), 0);
  const auto killed_at = Clock::now();
  ::waitpid(children_[kVictim].pid, nullptr, 0);
  children_[kVictim].pid = -1;

  for (int rank = 0; rank < kRanks; ++rank) {
    if (rank == kVictim) continue;
    const std::string line = read_line(children_[static_cast<std::size_t>(rank)].report_fd, 5s);
    const auto elapsed = Clock::now() - killed_at;
    EXPECT_LT(elapsed, 5s) << "rank " << rank;
    EXPECT_EQ(line, "ok 1 all_reduce 1 all_reduce") << "rank " << rank;
  }
  for (int rank = 0; rank < kRanks; ++rank) {
    auto& child = children_[static_cast<std::size_t>(rank)];
    if (child.pid < 0) continue;
    // A survivor must also get through destroying its communicator: bounded, TearDown kills.
    int status = 0;
    pid_t reaped = 0;
    for (const auto deadline = Clock::now() + 10s; reaped == 0 && Clock::now() < deadline;) {
      reaped = ::waitpid(child.pid, &status, WNOHANG);
      if (reaped == 0) std::this_thread::sleep_for(10ms);
    }
    ASSERT_EQ(reaped, child.pid) << "rank " << rank << " did not exit within 10 s";
    child.pid = -1;
    EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0)
        << "rank " << rank << " exited with status " << WEXITSTATUS(status) << ", signal "
        << (WIFSIGNALED(status) ? WTERMSIG(status) : 0);
  }
}

std::string case_name(const ::testing::TestParamInfo<Case>& param) {
  return param.param.name;
}

// Shared memory: survivors notice the death by the pid check and fail cleanly. With every
// transport (sm: CMA too) the all_reduce runs through mapped memory, not messages, so UCX
// never calls process_vm_readv on the dead pid (see the disabled case below).
INSTANTIATE_TEST_SUITE_P(SharedMemory, UcxKillTest,
                         ::testing::Values(Case{"posix,sysv,self", "250ms", "without_cma"},
                                           Case{"sm,self", "250ms", "mapped_with_cma"}),
                         case_name);

// Over tcp UCX reports the broken connection; the survivors then stop progressing their
// workers (no fragment of a broken transfer is handled, nothing lands in a failed operation's
// buffer), and the transport turns off UCX 1.13's crashing tcp zero-copy (see docs/transports.md).
INSTANTIATE_TEST_SUITE_P(Tcp, UcxKillTest,
                         ::testing::Values(Case{"tcp", "1h", "tcp_by_ucx_error_handling"},
                                           Case{"tcp", "250ms", "tcp"}),
                         case_name);

// KNOWN TO FAIL with Debian's UCX 1.13.1, kept runnable (--gtest_also_run_disabled_tests): when
// large messages go over cma (map_peers off, or a large send, recv or broadcast),
// process_vm_readv on the dead pid is fatal inside ucp_worker_progress (uct_cma_ep_tx,
// "No such process"), because UCX 1.13 refuses peer error handling for its shared-memory
// transports; the death is noticed by the pid check only after UCX has already aborted.
INSTANTIATE_TEST_SUITE_P(DISABLED_Ucx113Crashes, UcxKillTest,
                         ::testing::Values(Case{"sm,self", "250ms", "messages_over_cma", "false"}),
                         case_name);

}  // namespace
}  // namespace tessera
