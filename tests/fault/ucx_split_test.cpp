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
