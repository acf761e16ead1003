#pragma once
// The kill scenario shared by the shm and ucx fault tests: kRanks forked workers each connect a
// communicator and all_reduce 16 MiB in a loop; the test SIGKILLs rank kVictim in the middle of
// an all_reduce, and every survivor's pending operation, and its next one, must fail within
// 5 s with a TransportError naming the victim. Then each survivor must exit cleanly.

#include <gtest/gtest.h>
#include <poll.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "fault_test_support.hpp"
#include "tessera/base/error.hpp"
#include "tessera/plugin/communicator.hpp"
#include "tessera/plugin/transport.hpp"

namespace tessera::kill_test {

using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;

inline constexpr int kRanks = 3;
inline constexpr int kVictim = 1;
inline constexpr std::size_t kElements = std::size_t{4} << 20;  // 16 MiB of float

// What every survivor must report.
inline const std::string kSurvivorReport = "ok 1 all_reduce 1 all_reduce";

// Worker side, in the forked child: connects rank `rank` of kRanks over `transport` (with
// `options`, plugins from the build's folder) through a file store in `folder`, warms up,
// writes "ready", then all_reduces until one fails; the next must fail too. Writes
// "ok <peer> <op> <peer> <op>" (the failures' peer_rank and operation) or what went wrong, and
// exits: 0 only for "ok".
[[noreturn]] inline void run_worker(const std::string& transport_name,
                                    std::map<std::string, std::string> options,
                                    const std::filesystem::path& folder, int rank, int report_fd) {
  int code = 1;
  auto report = [&](const std::string& line) {
    const std::string text = line + "\n";
    if (::write(report_fd, text.data(), text.size()) < 0) code = 3;
  };
  try {
    const auto plugins =
        fault_test::load_worker_plugins(transport_name, std::move(options), folder);
    auto comm = plugins->transport->connect(plugins->store, rank, kRanks, 30s);
    std::vector<float> data(kElements, 1.0f);
    for (int i = 0; i < 3; ++i) comm->all_reduce(view_of(std::span(data)), ReduceOp::sum)->wait();
    report("ready");
    try {
      for (;;) comm->all_reduce(view_of(std::span(data)), ReduceOp::sum)->wait(30s);
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
inline std::string read_line(int fd, Clock::duration timeout) {
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

// Test side: the forked workers. Whatever is still running at destruction is killed.
class Workers {
 public:
  Workers() = default;
  Workers(const Workers&) = delete;
  Workers& operator=(const Workers&) = delete;
  ~Workers() {
    for (auto& child : children_) {
      if (child.pid > 0) {
        ::kill(child.pid, SIGKILL);
        ::waitpid(child.pid, nullptr, 0);
      }
      if (child.report_fd >= 0) ::close(child.report_fd);
    }
  }

  // Forks `ranks` children; child `rank` runs `worker(rank, report_fd)`, which must not return.
  void start(const std::function<void(int rank, int report_fd)>& worker, int ranks = kRanks) {
    for (int rank = 0; rank < ranks; ++rank) {
      int fds[2];
      ASSERT_EQ(::pipe(fds), 0);
      const pid_t pid = ::fork();
      ASSERT_GE(pid, 0);
      if (pid == 0) {
        ::close(fds[0]);
        worker(rank, fds[1]);
        ::_exit(4);
      }
      ::close(fds[1]);
      children_.push_back({pid, fds[0]});
    }
  }

  // The read end of rank's report pipe.
  [[nodiscard]] int report_fd(int rank) const {
    return children_[static_cast<std::size_t>(rank)].report_fd;
  }

  [[nodiscard]] std::vector<int> pids() const {
    std::vector<int> out;
    for (const auto& child : children_) out.push_back(child.pid);
    return out;
  }

  // The scenario: every worker ready, the victim killed mid-all_reduce, every survivor
  // reporting kSurvivorReport within 5 s and exiting 0 within 10 s more.
  // `within`: how soon after the kill each survivor must report its failed operation.
  void kill_victim_and_check_survivors(std::chrono::milliseconds within = 5s) {
    // Past "ready" every worker runs all_reduce after all_reduce until it fails: the kill lands
    // inside one, or before the victim's first while its peers wait in theirs.
    for (const auto& child : children_) ASSERT_EQ(read_line(child.report_fd, 60s), "ready");

    ASSERT_EQ(::kill(children_[kVictim].pid, SIGKILL), 0);
    const auto killed_at = Clock::now();
    ::waitpid(children_[kVictim].pid, nullptr, 0);
    children_[kVictim].pid = -1;

    for (int rank = 0; rank < kRanks; ++rank) {
      if (rank == kVictim) continue;
      const std::string line = read_line(children_[static_cast<std::size_t>(rank)].report_fd, 5s);
      EXPECT_LT(Clock::now() - killed_at, within) << "rank " << rank;
      EXPECT_EQ(line, kSurvivorReport) << "rank " << rank;
    }
    for (int rank = 0; rank < kRanks; ++rank) {
      auto& child = children_[static_cast<std::size_t>(rank)];
      if (child.pid < 0) continue;
      // A survivor must also get through destroying its communicator: bounded.
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

 private:
  struct Child {
    pid_t pid = -1;
    int report_fd = -1;  // the child writes "ready\n", then one result line
  };
  std::vector<Child> children_;
};

}  // namespace tessera::kill_test
