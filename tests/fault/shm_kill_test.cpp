// SIGKILL one rank of a multi-process shm group in the middle of a loop of large all_reduces:
// every survivor's pending operation, and its next one, must fail within 5 s with a
// TransportError naming the killed rank, and nothing may be left in /dev/shm.
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <string>

#include "fault_test_support.hpp"
#include "kill_harness.hpp"

namespace tessera {
namespace {

TEST(ShmKillTest, SurvivorsFailWithinFiveSecondsNamingTheKilledRankAndLeaveNoSegment) {
  const auto folder =
      std::filesystem::temp_directory_path() / ("tessera_shm_kill_" + std::to_string(::getpid()));
  std::filesystem::remove_all(folder);
  std::vector<int> pids;
  {
    kill_test::Workers workers;
    workers.start([&](int rank, int report_fd) {
      kill_test::run_worker("shm", {}, folder, rank, report_fd);
    });
    pids = workers.pids();
    workers.kill_victim_and_check_survivors();
  }
  EXPECT_TRUE(fault_test::shm_segments_of(pids).empty());
  std::filesystem::remove_all(folder);
}

}  // namespace
}  // namespace tessera
