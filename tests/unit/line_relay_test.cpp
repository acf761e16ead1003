// The launcher's line relay: whatever the worker's writes look like (tiny fragments, lines
// across reads, no final newline, lines longer than the relay's buffer, a slow non-blocking
// target), every line comes out whole, prefixed once, with nothing dropped or inserted.
#include "line_relay.hpp"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <poll.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include <random>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

namespace {

using tessera::launch::LineRelay;

// Writes `text` from a child process in fragments of 1..max_fragment bytes, pausing between
// some of them so that the relay sees every kind of partial read. Returns the child's pid and
// the read end of its pipe.
std::pair<pid_t, int> spawn_writer(const std::string& text, std::size_t max_fragment,
                                   unsigned seed) {
  int fds[2];
  EXPECT_EQ(::pipe(fds), 0);
  const pid_t pid = ::fork();
  if (pid == 0) {
    ::close(fds[0]);
    std::mt19937 random(seed);
    std::size_t at = 0;
    while (at < text.size()) {
      const std::size_t n = std::min<std::size_t>(
          text.size() - at, std::uniform_int_distribution<std::size_t>(1, max_fragment)(random));
      const ssize_t written = ::write(fds[1], text.data() + at, n);
      if (written <= 0) ::_exit(3);
      at += static_cast<std::size_t>(written);
      if (random() % 8 == 0) ::usleep(random() % 300);
    }
    ::_exit(0);
  }
  ::close(fds[1]);
  return {pid, fds[0]};
}

// Pumps every relay until all their sources have ended, as the launcher's loop does.
void run_relays(std::vector<LineRelay>& relays) {
  for (;;) {
    std::vector<pollfd> fds;
    for (const auto& r : relays)
      if (r.open()) fds.push_back({r.source(), POLLIN, 0});
    if (fds.empty()) return;
    ::poll(fds.data(), fds.size(), 100);
    for (auto& r : relays) r.pump();
  }
}

std::string read_file(int fd) {
  std::string out;
  char buffer[65536];
  ::lseek(fd, 0, SEEK_SET);
  for (ssize_t n; (n = ::read(fd, buffer, sizeof buffer)) > 0;)
    out.append(buffer, static_cast<std::size_t>(n));
  return out;
}

void expect_child_ok(pid_t pid) {
  int status = 0;
  ASSERT_EQ(::waitpid(pid, &status, 0), pid);
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0);
}

std::string prefixed(int rank, const std::string& text) {
  std::istringstream in(text);
  std::string out;
  for (std::string line; std::getline(in, line);)
    out += "[rank " + std::to_string(rank) + "] " + line + "\n";
  return out;
}

TEST(LineRelay, TinyFragmentsComeOutAsWholeLines) {
  std::string text = "tessera: error: rank 0 died\n";
  for (int i = 0; i < 200; ++i) text += "line " + std::to_string(i) + " of the worker\n";
  const auto [pid, source] = spawn_writer(text, 3, 1);
  const int target = ::memfd_create("relay", 0);
  std::vector<LineRelay> relays;
  relays.emplace_back(1, source, target);
  run_relays(relays);
  expect_child_ok(pid);
  EXPECT_EQ(read_file(target), prefixed(1, text));
  ::close(target);
}

TEST(LineRelay, FinalLineWithoutNewlineIsCompleted) {
  const auto [pid, source] = spawn_writer("first\ntessera: error: no newline at the end", 2, 2);
  const int target = ::memfd_create("relay", 0);
  std::vector<LineRelay> relays;
  relays.emplace_back(3, source, target);
  run_relays(relays);
  expect_child_ok(pid);
  EXPECT_EQ(read_file(target), "[rank 3] first\n[rank 3] tessera: error: no newline at the end\n");
  ::close(target);
}

TEST(LineRelay, LineLongerThanTheBufferIsNeverCut) {
  std::string long_line(3 * LineRelay::kMaxBufferedLine + 17, 'x');
  for (std::size_t i = 0; i < long_line.size(); i += 101) long_line[i] = 'y';
  const std::string text = "before\n" + long_line + "\nafter\n" + long_line;
  const auto [pid, source] = spawn_writer(text, 40000, 3);
  const int target = ::memfd_create("relay", 0);
  std::vector<LineRelay> relays;
  relays.emplace_back(0, source, target);
  run_relays(relays);
  expect_child_ok(pid);
  EXPECT_EQ(read_file(target), "[rank 0] before\n[rank 0] " + long_line +
                                   "\n[rank 0] after\n[rank 0] " + long_line + "\n");
  ::close(target);
}

TEST(LineRelay, SlowNonBlockingTargetLosesNothing) {
  // The launcher's own stderr may be a non-blocking pipe read slowly: a full pipe must be
  // waited for, not make the relay drop the rest of a line.
  std::string text;
  for (int i = 0; i < 4000; ++i)
    text += "tessera: error: message number " + std::to_string(i) + "\n";
  const auto [pid, source] = spawn_writer(text, 4096, 4);
  int out[2];
  ASSERT_EQ(::pipe2(out, O_NONBLOCK), 0);
  std::string received;
  std::thread reader([&] {
    ::fcntl(out[0], F_SETFL, 0);
    char buffer[512];
    for (ssize_t n; (n = ::read(out[0], buffer, sizeof buffer)) > 0;) {
      received.append(buffer, static_cast<std::size_t>(n));
      std::this_thread::sleep_for(std::chrono::microseconds(50));  // a slow reader, on purpose
    }
  });
  {
    std::vector<LineRelay> relays;
    relays.emplace_back(1, source, out[1]);
    run_relays(relays);
  }
  ::close(out[1]);
  reader.join();
  ::close(out[0]);
  expect_child_ok(pid);
  EXPECT_EQ(received, prefixed(1, text));
}

TEST(LineRelay, StressManyWritersIntoOneTarget) {
  // Several ranks, each writing many lines in random fragments, relayed into one target: every
  // line comes out exactly once, whole, after its own rank's prefix and in its rank's order.
  constexpr int kRanks = 6;
  constexpr int kLines = 500;
  const int target = ::memfd_create("relay", 0);
  std::vector<pid_t> pids;
  std::vector<LineRelay> relays;
  for (int rank = 0; rank < kRanks; ++rank) {
    std::string text;
    for (int i = 0; i < kLines; ++i)
      text += "tessera: error: rank " + std::to_string(rank) + " line " + std::to_string(i) +
              std::string(static_cast<std::size_t>(i % 97), '.') + "\n";
    const auto [pid, source] =
        spawn_writer(text, 1 + static_cast<std::size_t>(rank) * 50, 100 + rank);
    pids.push_back(pid);
    relays.emplace_back(rank, source, target);
  }
  run_relays(relays);
  for (const pid_t pid : pids) expect_child_ok(pid);
  std::istringstream in(read_file(target));
  std::vector<int> next(kRanks, 0);
  int total = 0;
  for (std::string line; std::getline(in, line); ++total) {
    const int rank = line.size() > 6 ? line[6] - '0' : -1;
    ASSERT_GE(rank, 0);
    ASSERT_LT(rank, kRanks);
    const int i = next[static_cast<std::size_t>(rank)]++;
    ASSERT_EQ(line, "[rank " + std::to_string(rank) + "] tessera: error: rank " +
                        std::to_string(rank) + " line " + std::to_string(i) +
                        std::string(static_cast<std::size_t>(i % 97), '.'));
  }
  EXPECT_EQ(total, kRanks * kLines);
  ::close(target);
}

}  // namespace
