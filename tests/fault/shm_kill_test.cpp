// SIGKILL one rank of a multi-process shm group in the middle of a loop of large all_reduces:
// every survivor's pending operation, and its next one, must fail within 5 s with a
// TransportError naming the killed rank, and nothing may be left in /dev/shm.
#include <gtest/gtest.h>
#include <poll.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstring>
#include <filesystem>
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

struct Child {
  pid_t pid = -1;
  int report_fd = -1;  // the child writes "ready\n", then one result line
};

// What a worker reports: "ok <peer> <op>" when its operations failed as they must.
[[noreturn]] void run_worker(int rank, const std::filesystem::path& folder, int report_fd) {
  int code = 1;
  auto report = [&](const std::string& line) {
    const std::string text = line + "\n";
    if (::write(report_fd, text.data(), text.size()) < 0) code = 3;
  };
  try {
    PluginRegistry registry;
    registry.scan_directory(TESSERA_PLUGIN_DIR);
    auto store = registry.create<Store>(
        "file",
        fault_test::options_for(registry, PluginKind::store, "file", {{"path", folder.string()}}));
    auto transport = registry.create<Transport>(
        "shm", fault_test::options_for(registry, PluginKind::transport, "shm"));
    auto comm = transport->connect(store, rank, kRanks, 30s);
    std::vector<float> data(kElements, 1.0f);
    for (int i = 0; i < 3; ++i) comm->all_reduce(view_of(std::span(data)), ReduceOp::sum)->wait();
    report("ready");
    try {
      for (;;) comm->all_reduce(view_of(std::span(data)), ReduceOp::sum)->wait();
    } catch (const TransportError& first) {
      // The next operation must fail at once, for the same reason.
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

class ShmKillTest : public ::testing::Test {
 protected:
  void SetUp() override {
    folder_ =
        std::filesystem::temp_directory_path() / ("tessera_shm_kill_" + std::to_string(::getpid()));
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

TEST_F(ShmKillTest, SurvivorsFailWithinFiveSecondsNamingTheKilledRankAndLeaveNoSegment) {
  for (int rank = 0; rank < kRanks; ++rank) {
    int fds[2];
    ASSERT_EQ(::pipe(fds), 0);
    const pid_t pid = ::fork();
    ASSERT_GE(pid, 0);
    if (pid == 0) {
      ::close(fds[0]);
      run_worker(rank, folder_, fds[1]);
    }
    ::close(fds[1]);
    children_.push_back({pid, fds[0]});
  }
  std::vector<int> pids;
  for (const auto& child : children_) pids.push_back(child.pid);
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
    int status = 0;
    ASSERT_EQ(::waitpid(child.pid, &status, 0), child.pid);
    child.pid = -1;
    EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << "rank " << rank;
  }
  EXPECT_TRUE(fault_test::shm_segments_of(pids).empty());
}

}  // namespace
}  // namespace tessera
