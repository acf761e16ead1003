// SIGKILL one rank of a multi-process ucx group in the middle of a loop of large all_reduces:
// every survivor's pending operation, and its next one, must fail within 5 s (0.8 s where UCX
// reports the broken connection itself: no wait for the dead rank's abort notice) with a
// TransportError naming the killed rank. Parameterised over UCX_TLS, since how the death is
// noticed differs: UCX 1.13's shared-memory transports refuse peer error handling, so there the
// transport's check of peer pids on this host does it; over tcp UCX reports the broken
// connection itself (one case turns the pid check off to exercise exactly that path).
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <string>

#include "fault_test_support.hpp"
#include "kill_harness.hpp"

namespace tessera {
namespace {

struct Case {
  const char* tls;                // UCX_TLS for every rank
  const char* liveness_interval;  // the transport's same-host pid check
  const char* name;
  const char* map_peers = "true";  // the transport's mapped collectives
  // How soon every survivor's operation must fail. Where UCX reports the broken connection,
  // sooner than the abort handshake's 1 s: a survivor does not wait for the notice of a peer
  // whose loss it already saw.
  std::chrono::milliseconds within = std::chrono::seconds(5);
};

class UcxKillTest : public ::testing::TestWithParam<Case> {};

TEST_P(UcxKillTest, SurvivorsFailWithinFiveSecondsNamingTheKilledRank) {
  const Case& c = GetParam();
  const auto folder = std::filesystem::temp_directory_path() /
                      ("tessera_ucx_kill_" + std::to_string(::getpid()) + "_" + c.name);
  std::filesystem::remove_all(folder);
  {
    kill_test::Workers workers;
    workers.start([&](int rank, int report_fd) {
      ::setenv("UCX_TLS", c.tls, 1);
      kill_test::run_worker(
          "ucx", {{"liveness_interval", c.liveness_interval}, {"map_peers", c.map_peers}}, folder,
          rank, report_fd);
    });
    workers.kill_victim_and_check_survivors(c.within);
  }
  std::filesystem::remove_all(folder);
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
                         ::testing::Values(Case{"tcp", "1h", "tcp_by_ucx_error_handling", "true",
                                                std::chrono::milliseconds(800)},
                                           Case{"tcp", "250ms", "tcp"}),
                         case_name);

// KNOWN TO FAIL with Debian's UCX 1.13.1, kept runnable (--gtest_also_run_disabled_tests): when
// large messages go over cma (map_peers off, or a large send or recv),
// process_vm_readv on the dead pid is fatal inside ucp_worker_progress (uct_cma_ep_tx,
// "No such process"), because UCX 1.13 refuses peer error handling for its shared-memory
// transports; the death is noticed by the pid check only after UCX has already aborted.
INSTANTIATE_TEST_SUITE_P(DISABLED_Ucx113Crashes, UcxKillTest,
                         ::testing::Values(Case{"sm,self", "250ms", "messages_over_cma", "false"}),
                         case_name);

}  // namespace
}  // namespace tessera
