// A shm world whose segment does not fit in /dev/shm is refused at connect, before anything is
// created, with the bytes needed against those free; without the check tmpfs accepts the
// (sparse) segment and the job dies of SIGBUS once its pages are touched, or here: waits for
// ranks that never come.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <poll.h>
#include <sched.h>
#include <signal.h>
#include <sys/mount.h>
#include <sys/resource.h>
#include <sys/statvfs.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <map>
#include <optional>
#include <regex>
#include <span>
#include <sstream>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "fault_test_support.hpp"
#include "tessera/base/error.hpp"
#include "tessera/plugin/communicator.hpp"
#include "tessera/plugin/transport.hpp"

namespace tessera {
namespace {

using namespace std::chrono_literals;

TEST(ShmRoomTest, AWorldLargerThanDevShmIsRefusedNamingNeededAndFreeBytes) {
  struct statvfs fs {};
  ASSERT_EQ(::statvfs("/dev/shm", &fs), 0);
  const long double free_bytes =
      static_cast<long double>(fs.f_bavail) * static_cast<long double>(fs.f_frsize);
  // 64 ranks x 64 x 2 point-to-point channels of 1 GiB: 8 TiB, more than any /dev/shm.
  ASSERT_LT(free_bytes, 64.0L * 64 * 2 * (1LL << 30));

  const auto folder =
      std::filesystem::temp_directory_path() / ("tessera_shm_room_" + std::to_string(::getpid()));
  std::filesystem::remove_all(folder);
  const auto segments_before = fault_test::shm_segments_of({::getpid()});
  {
    const auto plugins =
        fault_test::load_worker_plugins("shm", {{"p2p_chunk_size", "1GiB"}}, folder);
    const auto started = std::chrono::steady_clock::now();
    try {
      const auto comm = plugins->transport->connect(plugins->store, 0, 64, 5s);
      FAIL() << "a 64-rank world with 1 GiB channels was not refused";
    } catch (const OutOfMemory& e) {
      // Not a TransportError: no peer failed, so an elastic job does not regroup into it.
      const std::string what = e.what();
      EXPECT_TRUE(std::regex_search(
          what,
          std::regex(
              "a world of 64 ranks needs a shared-memory segment of 8\\.0 TiB \\([0-9]+ bytes: .*"
              "64 x 64 x 2 x 1\\.0 GiB from p2p_chunk_size.*/dev/shm has only "
              "[0-9.]+ [KMGT]?i?B free; free space in /dev/shm")))
          << what;
    }
    // Refused at once, not after the connect timeout.
    EXPECT_LT(std::chrono::steady_clock::now() - started, 2s);
  }
  EXPECT_EQ(fault_test::shm_segments_of({::getpid()}), segments_before);
  std::filesystem::remove_all(folder);
}

// ---- A private /dev/shm: the tests below fill a tmpfs of their own, never the machine's. ----

using Clock = std::chrono::steady_clock;

constexpr int kRanks = 3;
constexpr std::size_t kPrivateShmBytes = std::size_t{8} << 20;
// A segment of about 3.4 MiB: 3 ranks x 2 x 3 x 128 KiB of staging, 3 x 3 x 2 x 68 KiB of
// channels.
const std::map<std::string, std::string> kSmallSegment = {{"chunk_size", "128KiB"},
                                                          {"p2p_chunk_size", "64KiB"}};

// What one rank did, as its host saw it.
struct RankOutcome {
  // Its last line: "ok", "error <peer_rank> <operation> <message>" (a TransportError) or "out of
  // memory <message>" (OutOfMemory: /dev/shm has no room).
  std::string report;
  int status = -1;     // from waitpid
  double seconds = 0;  // from the start of its connect to its report
};

// How a world of kRanks is run (see run_world).
struct WorldSetup {
  // On a tmpfs of kPrivateShmBytes of the world's own (a mount namespace) instead of the
  // machine's /dev/shm, which the tests never fill.
  bool private_shm = true;
  // Fill /dev/shm before the ranks start, down to this many bytes free.
  std::optional<std::size_t> leave_before_connect;
  // Fill /dev/shm completely once every rank has connected, before any collective.
  bool fill_after_connect = false;
  // The world size rank 1 asks for (the others ask for kRanks).
  int rank1_world_size = kRanks;
  // Rank 0's limit on the size of a file it creates (ulimit -f), where set.
  std::optional<std::size_t> rank0_file_size_limit;
};

struct WorldOutcome {
  std::string skipped;  // why the mount namespace could not be made; empty when it was
  std::vector<RankOutcome> ranks;
  std::vector<std::string> left_in_shm;  // the ranks' tessera-shm-* names in /dev/shm afterwards
  std::string host_error;
};

std::string describe(int status) {
  if (WIFSIGNALED(status)) return "killed by signal " + std::to_string(WTERMSIG(status));
  if (WIFEXITED(status)) return "exit " + std::to_string(WEXITSTATUS(status));
  return "status " + std::to_string(status);
}

void write_line(int fd, const std::string& line) {
  const std::string text = line + "\n";
  if (::write(fd, text.data(), text.size()) != static_cast<ssize_t>(text.size())) ::_exit(3);
}

// Fills /dev/shm with one file until at most `leave` bytes are free.
void fill_dev_shm(std::size_t leave) {
  const int fd = ::open("/dev/shm/filler", O_WRONLY | O_CREAT | O_TRUNC, 0600);
  if (fd < 0) throw std::runtime_error("cannot create /dev/shm/filler");
  std::vector<char> block(64 << 10, 'x');
  for (;;) {
    struct statvfs fs {};
    if (::statvfs("/dev/shm", &fs) != 0) break;
    const auto free_bytes = static_cast<std::size_t>(fs.f_bavail) * fs.f_frsize;
    if (free_bytes <= leave) break;
    const auto chunk = std::min(block.size(), free_bytes - leave);
    if (::write(fd, block.data(), chunk) <= 0) break;  // ENOSPC: full
  }
  ::close(fd);
}

// One rank, in its own process: connects over the shm transport with kSmallSegment, writes
// "connected", waits for a byte on `go_fd`, then all_reduces 4 MiB (through every staging
// buffer) and sends 256 KiB round the ring (through both slots of its channels). Reports "ok"
// or the error.
[[noreturn]] void run_rank(const std::filesystem::path& folder, int rank, int world_size,
                           std::optional<std::size_t> file_size_limit, int report_fd, int go_fd) {
  int code = 1;
  if (file_size_limit) {
    ::signal(SIGXFSZ, SIG_IGN);  // a file grown past the limit then fails with EFBIG
    const rlimit limit{*file_size_limit, *file_size_limit};
    if (::setrlimit(RLIMIT_FSIZE, &limit) != 0) ::_exit(7);
  }
  try {
    const auto plugins = fault_test::load_worker_plugins("shm", kSmallSegment, folder);
    auto comm = plugins->transport->connect(plugins->store, rank, world_size, 60s);
    write_line(report_fd, "connected");
    char go = 0;
    if (::read(go_fd, &go, 1) != 1) ::_exit(5);
    std::vector<float> data(std::size_t{1} << 20, 1.0f);
    comm->all_reduce(view_of(std::span(data)), ReduceOp::sum)->wait(30s);
    std::vector<float> message(std::size_t{64} << 10, static_cast<float>(rank));
    std::vector<float> received(message.size());
    auto sent = comm->send(view_of(std::span(message)), (rank + 1) % kRanks, 7);
    comm->recv(view_of(std::span(received)), (rank + kRanks - 1) % kRanks, 7)->wait(30s);
    sent->wait(30s);
    const bool right = data[0] == kRanks && received[0] == (rank + kRanks - 1) % kRanks;
    write_line(report_fd, right ? "ok" : "wrong result");
    code = right ? 0 : 2;
  } catch (const TransportError& e) {
    write_line(report_fd, "error " + std::to_string(e.peer_rank().value_or(-1)) + " " +
                              e.operation() + " " + e.what());
  } catch (const OutOfMemory& e) {
    write_line(report_fd, std::string("out of memory ") + e.what());
  } catch (const std::exception& e) {
    write_line(report_fd, std::string("error - - ") + e.what());
  }
  ::_exit(code);
}

// Reads one line from fd within `timeout`; empty on timeout or end of file.
std::string read_line(int fd, Clock::duration timeout) {
  std::string line;
  const auto deadline = Clock::now() + timeout;
  char c = 0;
  while (Clock::now() < deadline) {
    pollfd entry{fd, POLLIN, 0};
    if (::poll(&entry, 1, 100) <= 0) continue;
    if (::read(fd, &c, 1) != 1) break;
    if (c == '\n') return line;
    line += c;
  }
  return line;
}

// In the host process (inside the private namespace where setup asks for one): starts kRanks
// ranks, fills /dev/shm as `setup` says, lets them run, writes what each did to `out_fd`,
// then lists what they left in /dev/shm.
void host_world(const WorldSetup& setup, int out_fd) {
  const auto folder = std::filesystem::temp_directory_path() /
                      ("tessera_shm_room_world_" + std::to_string(::getpid()));
  std::filesystem::remove_all(folder);
  if (setup.leave_before_connect) fill_dev_shm(*setup.leave_before_connect);
  struct Child {
    pid_t pid;
    int report_fd;
    int go_fd;
  };
  std::vector<Child> children;
  const auto started = Clock::now();
  for (int rank = 0; rank < kRanks; ++rank) {
    int report[2];
    int go[2];
    if (::pipe(report) != 0 || ::pipe(go) != 0) ::_exit(6);
    const pid_t pid = ::fork();
    if (pid == 0) {
      ::close(report[0]);
      ::close(go[1]);
      run_rank(folder, rank, rank == 1 ? setup.rank1_world_size : kRanks,
               rank == 0 ? setup.rank0_file_size_limit : std::nullopt, report[1], go[0]);
    }
    ::close(report[1]);
    ::close(go[0]);
    children.push_back({pid, report[0], go[1]});
  }
  std::vector<std::string> first(kRanks);
  for (int rank = 0; rank < kRanks; ++rank)
    first[static_cast<std::size_t>(rank)] = read_line(children[rank].report_fd, 90s);
  const bool all_connected =
      std::all_of(first.begin(), first.end(), [](const auto& l) { return l == "connected"; });
  if (all_connected && setup.fill_after_connect) fill_dev_shm(0);
  // A rank that failed already does not read it (EPIPE): its report says why.
  for (auto& child : children) (void)!::write(child.go_fd, "g", 1);
  for (int rank = 0; rank < kRanks; ++rank) {
    auto& child = children[static_cast<std::size_t>(rank)];
    std::string line = first[static_cast<std::size_t>(rank)];
    if (line == "connected") line = read_line(child.report_fd, 60s);
    const double seconds = std::chrono::duration<double>(Clock::now() - started).count();
    int status = 0;
    pid_t reaped = 0;
    for (const auto deadline = Clock::now() + 10s; reaped == 0 && Clock::now() < deadline;) {
      reaped = ::waitpid(child.pid, &status, WNOHANG);
      if (reaped == 0) std::this_thread::sleep_for(10ms);
    }
    if (reaped == 0) {  // hangs after its report: end it, and say so
      ::kill(child.pid, SIGKILL);
      ::waitpid(child.pid, &status, 0);
      line += " (did not exit within 10 s)";
    }
    write_line(out_fd,
               "rank " + std::to_string(status) + " " + std::to_string(seconds) + " " + line);
  }
  ::unlink("/dev/shm/filler");
  std::vector<int> pids;
  for (const auto& child : children) pids.push_back(child.pid);
  for (const auto& name : fault_test::shm_segments_of(pids)) write_line(out_fd, "left " + name);
  std::filesystem::remove_all(folder);
}

// Forks a host process (with a mount namespace of its own and an 8 MiB tmpfs on /dev/shm where
// setup.private_shm asks for one), runs host_world there and parses what it reports.
// `skipped` says why when the namespace or the mount is not allowed here (not root, no
// CAP_SYS_ADMIN).
WorldOutcome run_world(const WorldSetup& setup) {
  WorldOutcome outcome;
  int out[2];
  if (::pipe(out) != 0) {
    outcome.host_error = "pipe failed";
    return outcome;
  }
  const pid_t host = ::fork();
  if (host == 0) {
    ::close(out[0]);
    ::signal(SIGPIPE, SIG_IGN);  // "go" to a rank that already failed must not end the host
    const std::string size = "size=" + std::to_string(kPrivateShmBytes);
    if (setup.private_shm && ::unshare(CLONE_NEWNS) != 0) {
      write_line(out[1], std::string("skip cannot create a mount namespace (unshare: ") +
                             std::strerror(errno) + "; needs root or CAP_SYS_ADMIN)");
      ::_exit(0);
    }
    // Private propagation first, so that the tmpfs never shows on the machine's /dev/shm.
    if (setup.private_shm &&
        (::mount(nullptr, "/", nullptr, MS_REC | MS_PRIVATE, nullptr) != 0 ||
         ::mount("tessera-room", "/dev/shm", "tmpfs", MS_NOSUID | MS_NODEV, size.c_str()) != 0)) {
      write_line(out[1], std::string("skip cannot mount a private tmpfs on /dev/shm (") +
                             std::strerror(errno) + ")");
      ::_exit(0);
    }
    try {
      host_world(setup, out[1]);
    } catch (const std::exception& e) {
      write_line(out[1], std::string("host ") + e.what());
    }
    ::_exit(0);
  }
  ::close(out[1]);
  for (std::string line; !(line = read_line(out[0], 180s)).empty();) {
    std::istringstream in(line);
    std::string word;
    in >> word;
    if (word == "skip") {
      outcome.skipped = line.substr(5);
    } else if (word == "rank") {
      RankOutcome rank;
      in >> rank.status >> rank.seconds;
      in.get();
      std::getline(in, rank.report);
      outcome.ranks.push_back(rank);
    } else if (word == "left") {
      outcome.left_in_shm.push_back(line.substr(5));
    } else {
      outcome.host_error += line;
    }
  }
  ::close(out[0]);
  int status = 0;
  ::waitpid(host, &status, 0);
  if (describe(status) != "exit 0") outcome.host_error += "host process: " + describe(status);
  return outcome;
}

// Every rank of a refused world exited 1 within 10 s (its connect timeout is 60 s), and none
// left a segment in /dev/shm.
void expect_every_rank_failed_at_once_leaving_nothing(const WorldOutcome& outcome) {
  for (const auto& result : outcome.ranks) {
    EXPECT_EQ(describe(result.status), "exit 1");
    EXPECT_LT(result.seconds, 10.0) << result.report;
  }
  EXPECT_EQ(outcome.left_in_shm, std::vector<std::string>{});
}

// tmpfs grants a segment's pages only as they are first touched: a /dev/shm that fills after
// the world connected used to end every rank with SIGBUS at its first large collective. The
// segment is reserved whole when it is created, so the world runs on.
TEST(ShmRoomTest, AWorldWhoseDevShmFillsAfterItConnectedRunsOnWithoutSigbus) {
  const auto outcome = run_world({.private_shm = true,
                                  .leave_before_connect = std::nullopt,
                                  .fill_after_connect = true,
                                  .rank1_world_size = kRanks,
                                  .rank0_file_size_limit = std::nullopt});
  if (!outcome.skipped.empty()) GTEST_SKIP() << outcome.skipped;
  EXPECT_EQ(outcome.host_error, "");
  ASSERT_EQ(outcome.ranks.size(), std::size_t{kRanks});
  for (int rank = 0; rank < kRanks; ++rank) {
    const auto& result = outcome.ranks[static_cast<std::size_t>(rank)];
    EXPECT_EQ(result.report, "ok") << "rank " << rank << ": " << describe(result.status);
    EXPECT_EQ(describe(result.status), "exit 0") << "rank " << rank;
  }
  EXPECT_EQ(outcome.left_in_shm, std::vector<std::string>{});
}

// A world that does not fit in the room left: rank 0, which creates the segment, refuses it
// naming /dev/shm, the bytes needed and free, and the options to lower; the other ranks do not
// wait out their connect timeout (60 s here) for a segment that will never come, but fail at
// once naming rank 0 and its reason; and no segment is left behind. Every rank throws
// OutOfMemory, not a TransportError: no peer failed, and a retry would be refused alike.
TEST(ShmRoomTest, ASegmentDevShmCannotHoldIsRefusedByRankZeroAndTheOthersFailAtOnceNamingIt) {
  const auto outcome = run_world({.private_shm = true,
                                  .leave_before_connect = std::size_t{1} << 20,
                                  .fill_after_connect = false,
                                  .rank1_world_size = kRanks,
                                  .rank0_file_size_limit = std::nullopt});
  if (!outcome.skipped.empty()) GTEST_SKIP() << outcome.skipped;
  EXPECT_EQ(outcome.host_error, "");
  ASSERT_EQ(outcome.ranks.size(), std::size_t{kRanks});
  // 883 pages: one of control, 3 x 2 x 96 of staging, 3 x 3 x 2 x 17 of channels.
  const std::string room =
      "a world of 3 ranks needs a shared-memory segment of 3\\.4 MiB \\(3616768 bytes: staging "
      "3 x 2 x 384\\.0 KiB from chunk_size, point-to-point channels 3 x 3 x 2 x 68\\.0 KiB from "
      "p2p_chunk_size\\), but /dev/shm has only 1\\.0 MiB free; free space in /dev/shm \\(.*\\), "
      "mount it larger \\(.*\\), lower \\[transport\\.shm\\] chunk_size or p2p_chunk_size";
  const auto& creator = outcome.ranks[0];
  EXPECT_TRUE(std::regex_search(creator.report, std::regex("^out of memory shm: " + room)))
      << creator.report;
  for (int rank = 1; rank < kRanks; ++rank) {
    const auto& result = outcome.ranks[static_cast<std::size_t>(rank)];
    EXPECT_TRUE(std::regex_search(
        result.report,
        std::regex("^out of memory shm connect \\(rank " + std::to_string(rank) +
                   " of 3\\): rank 0 \\(pid [0-9]+\\) could not create the world's shared "
                   "memory: shm: " +
                   room)))
        << "rank " << rank << ": " << result.report;
  }
  expect_every_rank_failed_at_once_leaving_nothing(outcome);
}

// The segment is allocated whole, so every reason the allocation can fail is met at connect:
// here rank 0 may not create a file of 3.4 MiB (ulimit -f 1 MiB). It is refused naming that
// limit and what to do, the others fail at once naming rank 0, and the half-made segment is
// gone from /dev/shm.
TEST(ShmRoomTest, ASegmentLargerThanTheFileSizeLimitIsRefusedNamingItAndLeavesNothing) {
  const auto outcome = run_world({.private_shm = false,
                                  .leave_before_connect = std::nullopt,
                                  .fill_after_connect = false,
                                  .rank1_world_size = kRanks,
                                  .rank0_file_size_limit = std::size_t{1} << 20});
  EXPECT_EQ(outcome.host_error, "");
  ASSERT_EQ(outcome.ranks.size(), std::size_t{kRanks});
  const std::string why =
      "shm: a world of 3 ranks needs a shared-memory segment of 3\\.4 MiB \\(3616768 bytes: .*\\), "
      "but /dev/shm has [0-9.]+ [KMGT]?i?B free and this process may not create a file that "
      "large \\(ulimit -f\\); raise that limit, free space in /dev/shm";
  EXPECT_TRUE(std::regex_search(outcome.ranks[0].report, std::regex("^out of memory " + why)))
      << outcome.ranks[0].report;
  for (int rank : {1, 2}) {
    EXPECT_TRUE(std::regex_search(
        outcome.ranks[static_cast<std::size_t>(rank)].report,
        std::regex("^out of memory shm connect \\(rank " + std::to_string(rank) +
                   " of 3\\): rank 0 \\(pid [0-9]+\\) could not create the world's shared "
                   "memory: " +
                   why)))
        << "rank " << rank << ": " << outcome.ranks[static_cast<std::size_t>(rank)].report;
  }
  expect_every_rank_failed_at_once_leaving_nothing(outcome);
}

// A rank that cannot join a world it found (here: it was started for a world of 2) records
// that in the segment before it gives up: the ranks already there fail at once naming it and
// why, instead of waiting out their connect timeout (60 s here) for a rank that never comes.
TEST(ShmRoomTest, ARankThatGivesUpAtTheRendezvousMakesTheOthersFailAtOnceNamingIt) {
  const auto outcome = run_world({.private_shm = false,
                                  .leave_before_connect = std::nullopt,
                                  .fill_after_connect = false,
                                  .rank1_world_size = 2,
                                  .rank0_file_size_limit = std::nullopt});
  EXPECT_EQ(outcome.host_error, "");
  ASSERT_EQ(outcome.ranks.size(), std::size_t{kRanks});
  const std::string why =
      "rank 1 \\(pid [0-9]+\\) expects a world of 2 ranks, not the 3 this one was created for: "
      "start every rank with one world size$";
  EXPECT_TRUE(
      std::regex_search(outcome.ranks[1].report, std::regex("^error -1 connect shm: " + why)))
      << outcome.ranks[1].report;
  for (int rank : {0, 2}) {
    EXPECT_TRUE(std::regex_search(outcome.ranks[static_cast<std::size_t>(rank)].report,
                                  std::regex("^error 1 connect shm connect \\(rank " +
                                             std::to_string(rank) + " of 3\\): " + why)))
        << "rank " << rank << ": " << outcome.ranks[static_cast<std::size_t>(rank)].report;
  }
  expect_every_rank_failed_at_once_leaving_nothing(outcome);
}

}  // namespace
}  // namespace tessera
