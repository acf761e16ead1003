// A split over ucx whose new group can never be greeted by one of its members: that member is
// stopped (SIGSTOP: alive, so no pid check and no broken connection says so) or killed after
// the split's exchange over the group, before its new group's greeting. The other member must
// not wait out the transport's timeout in that greeting: an abort of the group it splits from
// (an elastic run aborts its world when a member's lease ends), the loss of that member, or,
// with nobody aborting, its silence past stall_timeout ends the split at once with a
// TransportError naming the member, which an elastic run folds into a regroup. ShmSplitDeathTest
// and ShmSplitAbortTest hold the same for shm.
//
// The window is reached exactly. UcxCommunicator::split exchanges (color, key) and the new
// group's worker addresses over the group, then connects the new group's endpoints
// (ucp_ep_create) and greets. This executable defines ucp_ep_create itself and exports it (see
// CMakeLists.txt), so the plugin's calls land here first and go on to libucp's; armed once a
// worker's group is connected, the next call is the split's new group connecting. Once that
// call returned, the survivor says in the store that its greeting begins; the victim waits for
// that, then stops or dies before it greets.
#include <dlfcn.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <ucp/api/ucp.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <functional>
#include <ostream>
#include <sstream>
#include <string>
#include <thread>

#include "fault_test_support.hpp"
#include "kill_harness.hpp"
#include "tessera/base/error.hpp"
#include "tessera/elastic/elastic_world.hpp"
#include "tessera/plugin/communicator.hpp"
#include "tessera/plugin/transport.hpp"

namespace {

std::atomic<bool> child_connect_armed{false};
std::function<void()> on_child_connect;  // set before arming, in the worker process

}  // namespace

extern "C" ucs_status_t ucp_ep_create(ucp_worker_h worker, const ucp_ep_params_t* params,
                                      ucp_ep_h* ep_p) {
  using EpCreate = ucs_status_t (*)(ucp_worker_h, const ucp_ep_params_t*, ucp_ep_h*);
  // libucp's own: loaded by then, as the plugin's dependency.
  static const auto libucp_ep_create = [] {
    void* libucp = ::dlopen("libucp.so.0", RTLD_NOW | RTLD_NOLOAD);
    return libucp != nullptr ? reinterpret_cast<EpCreate>(::dlsym(libucp, "ucp_ep_create"))
                             : nullptr;
  }();
  if (libucp_ep_create == nullptr) return UCS_ERR_NO_ELEM;
  const ucs_status_t status = libucp_ep_create(worker, params, ep_p);
  if (child_connect_armed.exchange(false)) on_child_connect();
  return status;
}

namespace tessera {
namespace {

using namespace std::chrono_literals;
using kill_test::Clock;

constexpr int kRanks = 2;
constexpr int kSurvivor = 0;
constexpr int kVictim = 1;
// The transport's timeout, which bounds the greeting: the failure must come long before it. The
// survivor's abort waits up to 1 s for the stopped victim's answer, its greeting's send to the
// victim up to 1 s more.
constexpr auto kTransportTimeout = 20s;
constexpr auto kFailsWithin = 5s * tessera::fault_test::kSanitizerSlowdown;
// Set in the store by the survivor as its greeting begins, then by the victim as it stops or
// dies before its own.
const std::string kSurvivorGreets = "test/survivor_greets";
const std::string kVictimInWindow = "test/victim_stops_before_greeting";

// stopped: nobody aborts the group; the stall watchdog (stall_timeout kStallTimeout) must see
// the victim's silence.
enum class Fate { stopped_and_group_aborted, killed, stopped };
constexpr std::chrono::milliseconds kStallTimeout = 2s * fault_test::kSanitizerSlowdown;

struct Case {
  const char* tls;  // UCX_TLS for every rank; nullptr: UCX's default (on one host: shared memory)
  const char* name;
};

void PrintTo(const Case& c, std::ostream* os) {
  *os << "UCX_TLS=" << (c.tls != nullptr ? c.tls : "(default)");
}

// Connects rank `rank` of kRanks over ucx and splits the group into one new group of both. The
// victim stops or dies in the window; with Fate::stopped_and_group_aborted the survivor aborts
// its group once both are there. stall_timeout is kStallTimeout for Fate::stopped, and far
// beyond the timeout otherwise. The survivor reports
// "TransportError <ms> <peer_rank> <what>" (ms: the split's duration), or what else happened.
[[noreturn]] void split_worker(const Case& c, Fate fate, const std::filesystem::path& folder,
                               int rank, int report_fd) {
  int code = 1;
  const auto say = [&](const std::string& line) {
    const std::string text = line + "\n";
    if (::write(report_fd, text.data(), text.size()) < 0) code = 3;
  };
  try {
    fault_test::use_ucx_tls(c.tls);
    const auto ms = [](std::chrono::milliseconds d) { return std::to_string(d.count()) + "ms"; };
    const auto plugins = fault_test::load_worker_plugins(
        "ucx",
        {{"timeout", ms(kTransportTimeout)},
         {"stall_timeout", ms(fate == Fate::stopped ? kStallTimeout : 10 * kTransportTimeout)}},
        folder);
    auto group = plugins->transport->connect(plugins->store, rank, kRanks, kTransportTimeout);
    if (rank == kVictim) {
      on_child_connect = [&] {
        try {
          (void)plugins->store->get(kSurvivorGreets, kTransportTimeout);
          plugins->store->set(kVictimInWindow, "yes");
        } catch (const std::exception&) {
          // Stops or dies all the same; the survivor reports what it saw.
        }
        ::raise(fate == Fate::killed ? SIGKILL : SIGSTOP);
      };
    } else {
      on_child_connect = [&] { plugins->store->set(kSurvivorGreets, "yes"); };
    }
    child_connect_armed = true;
    std::thread aborter;
    if (rank == kSurvivor && fate == Fate::stopped_and_group_aborted) {
      aborter = std::thread([&] {
        try {
          (void)plugins->store->get(kVictimInWindow, kTransportTimeout);
          group->abort("worker w1's lease ended");
        } catch (const Timeout&) {
          // never in the window: the split's report says what happened instead
        }
      });
    }
    const auto started = Clock::now();
    const auto elapsed_ms = [&] {
      return std::to_string(
          std::chrono::duration_cast<std::chrono::milliseconds>(Clock::now() - started).count());
    };
    try {
      (void)group->split(0, rank);
      say("split succeeded after " + elapsed_ms() + " ms");
    } catch (const TransportError& e) {
      say("TransportError " + elapsed_ms() + " " + std::to_string(e.peer_rank().value_or(-1)) +
          " " + e.what());
      code = 0;
    } catch (const Timeout& e) {
      say("Timeout " + elapsed_ms() + " " + e.what());
    }
    if (aborter.joinable()) aborter.join();
  } catch (const std::exception& e) {
    say(std::string("error ") + e.what());
  }
  ::_exit(code);
}

struct SplitFailure {
  long ms = -1;
  int peer_rank = -2;
  std::string what;
};

// Runs the two workers and returns what the survivor's split threw; fails the test when it
// was not a TransportError.
SplitFailure run_split_with_victim(const Case& c, Fate fate) {
  const auto folder = std::filesystem::temp_directory_path() /
                      ("tessera_ucx_split_" + std::to_string(::getpid()) + "_" + c.name);
  std::filesystem::remove_all(folder);
  std::string report;
  {
    kill_test::Workers workers;
    workers.start([&](int rank, int report_fd) { split_worker(c, fate, folder, rank, report_fd); },
                  kRanks);
    report = kill_test::read_line(workers.report_fd(kSurvivor), kTransportTimeout + 20s);
  }
  std::filesystem::remove_all(folder);
  SplitFailure failure;
  std::istringstream in(report);
  std::string kind;
  in >> kind >> failure.ms >> failure.peer_rank;
  std::getline(in >> std::ws, failure.what);
  EXPECT_EQ(kind, "TransportError") << report;
  return failure;
}

class UcxSplitTest : public ::testing::TestWithParam<Case> {};

TEST_P(UcxSplitTest, AnAbortOfTheGroupEndsItsSplitsGreetingOfAStoppedMemberNamingIt) {
  const SplitFailure failure = run_split_with_victim(GetParam(), Fate::stopped_and_group_aborted);
  EXPECT_GE(failure.ms, 0) << failure.what;
  EXPECT_LT(std::chrono::milliseconds(failure.ms), kFailsWithin) << failure.what;
  EXPECT_NE(failure.what.find("worker w1's lease ended"), std::string::npos) << failure.what;
  EXPECT_NE(failure.what.find("still waiting for rank(s) 1 to greet"), std::string::npos)
      << failure.what;
}

TEST_P(UcxSplitTest, AMemberKilledBeforeGreetingEndsTheOthersSplitNamingIt) {
  const SplitFailure failure = run_split_with_victim(GetParam(), Fate::killed);
  EXPECT_GE(failure.ms, 0) << failure.what;
  EXPECT_LT(std::chrono::milliseconds(failure.ms), kFailsWithin) << failure.what;
  EXPECT_EQ(failure.peer_rank, kVictim) << failure.what;
  EXPECT_NE(failure.what.find("rank 1"), std::string::npos) << failure.what;
}

TEST_P(UcxSplitTest, AMemberStoppedBeforeGreetingIsNamedOnceStallTimeoutPasses) {
  const SplitFailure failure = run_split_with_victim(GetParam(), Fate::stopped);
  EXPECT_GE(std::chrono::milliseconds(failure.ms), kStallTimeout) << failure.what;
  EXPECT_LT(std::chrono::milliseconds(failure.ms), kStallTimeout + kFailsWithin) << failure.what;
  EXPECT_EQ(failure.peer_rank, kVictim) << failure.what;
  EXPECT_NE(failure.what.find("rank 1 (pid "), std::string::npos) << failure.what;
  EXPECT_NE(failure.what.find("made no progress"), std::string::npos) << failure.what;
}

// The same window inside an elastic run's regroup. Three members form a world and its side
// channel (a split); w2 leaves, and w0 and w1 regroup into generation 2. There w1 stops in the
// window of the side channel's split: after its new group's endpoints exist, before it greets.
// Nobody's process died and no connection broke; w1's lease ends failure_timeout later, when
// w0's watcher aborts generation 2's world, which ends the split's greeting: w0 folds it into the
// regroup and forms generation 3 alone, and connects its side channel, all long before the
// transport's timeout. Reports "regrouped <ms> <size>" (ms: from the split to the failure).
constexpr auto kLeaseTtl = 2s;

[[noreturn]] void elastic_worker(const std::filesystem::path& folder, int rank, int report_fd) {
  int code = 1;
  const auto say = [&](const std::string& line) {
    const std::string text = line + "\n";
    if (::write(report_fd, text.data(), text.size()) < 0) code = 3;
  };
  try {
    fault_test::use_ucx_tls("tcp");
    const auto ms = [](std::chrono::milliseconds d) { return std::to_string(d.count()) + "ms"; };
    const auto plugins = fault_test::load_worker_plugins(
        "ucx", {{"timeout", ms(kTransportTimeout)}, {"stall_timeout", ms(10 * kTransportTimeout)}},
        folder);
    ElasticOptions options;
    options.min_workers = 1;
    options.max_workers = 3;
    options.heartbeat = Duration(100);
    options.failure_timeout = kLeaseTtl;
    options.join_timeout = Duration(2000);
    auto elastic = make_elastic_world(plugins->transport, plugins->store, options,
                                      "w" + std::to_string(rank), kTransportTimeout);
    (void)elastic->enter(deadline_after(kTransportTimeout));
    (void)elastic->side_channel();
    // Every member's side channel is whole before anyone moves on (a regroup aborts the world).
    plugins->store->set("test/side_channel/" + std::to_string(rank), "yes");
    plugins->store->wait({"test/side_channel/0", "test/side_channel/1", "test/side_channel/2"},
                         kTransportTimeout);
    if (rank == 2) {
      elastic.reset();  // leaves: its lease is revoked
      ::_exit(0);
    }
    (void)elastic->regroup("test: w2 left", deadline_after(kTransportTimeout));
    if (rank == kVictim) {
      on_child_connect = [&] {
        try {
          (void)plugins->store->get(kSurvivorGreets, kTransportTimeout);
        } catch (const std::exception&) {  // NOLINT(bugprone-empty-catch): stops all the same
        }
        ::raise(SIGSTOP);
      };
    } else {
      on_child_connect = [&] { plugins->store->set(kSurvivorGreets, "yes"); };
    }
    child_connect_armed = true;
    const auto started = Clock::now();
    try {
      (void)elastic->side_channel();
      say("the side channel of generation 2 connected: the victim was never in the window");
    } catch (const TransportError& e) {
      const auto failed_after =
          std::chrono::duration_cast<std::chrono::milliseconds>(Clock::now() - started);
      const auto third = elastic->regroup(e.what(), deadline_after(kTransportTimeout));
      (void)elastic->side_channel();
      say("regrouped " + std::to_string(failed_after.count()) + " " +
          std::to_string(third.world->size()));
      code = 0;
    }
  } catch (const std::exception& e) {
    say(std::string("error ") + e.what());
  }
  ::_exit(code);
}

TEST(ElasticOverUcx, AMemberStoppedInItsSideChannelsGreetingIsFoldedIntoTheRegroup) {
  const auto folder = std::filesystem::temp_directory_path() /
                      ("tessera_ucx_split_elastic_" + std::to_string(::getpid()));
  std::filesystem::remove_all(folder);
  std::string report;
  {
    kill_test::Workers workers;
    workers.start([&](int rank, int report_fd) { elastic_worker(folder, rank, report_fd); }, 3);
    report = kill_test::read_line(workers.report_fd(kSurvivor), 2 * kTransportTimeout);
  }
  std::filesystem::remove_all(folder);
  std::istringstream in(report);
  std::string kind;
  long ms = -1;
  int size = 0;
  in >> kind >> ms >> size;
  ASSERT_EQ(kind, "regrouped") << report;
  // The lease's end, a watcher's look and the abort: well before the transport's 20 s.
  EXPECT_LT(std::chrono::milliseconds(ms), kLeaseTtl + kFailsWithin) << report;
  EXPECT_EQ(size, 1) << report;
}

std::string case_name(const ::testing::TestParamInfo<Case>& param) {
  return param.param.name;
}

// Over tcp (ranks on different hosts), UCX's default transports, and shared memory alone,
// which cannot report a peer's failure (there only the pid check sees a death; tcp, in the
// default set too, refuses the new group's connection to a dead member itself).
INSTANTIATE_TEST_SUITE_P(Transports, UcxSplitTest,
                         ::testing::Values(Case{"tcp", "ucx_tcp"}, Case{nullptr, "ucx_default"},
                                           Case{"sm,self", "ucx_shared_memory"}),
                         case_name);

}  // namespace
}  // namespace tessera
