// A split whose child group can never connect: a rank dies, or the group is aborted (an elastic
// run aborts its world once a member's lease ends), after the split's (color, key) exchange but
// before that rank attached to the child. The ranks already connecting the child must fail at
// once with a TransportError (which an elastic run folds into a regroup), not wait out the
// transport's timeout for a rank that will never come, and leave nothing in /dev/shm.
//
// The window is reached exactly: the rank that will never attach runs the exchange itself (the
// all_gather of one (color, key) pair of int32 per rank that ShmCommunicator::split runs on the
// group), then waits until the other rank is inside the child's connect, which counts its
// connects in the child's store namespace ("split<n>/color<c>", key "shm/connects/rank<r>")
// before it waits for anyone.
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdint>
#include <filesystem>
#include <future>
#include <map>
#include <span>
#include <string>
#include <vector>

#include "fault_test_support.hpp"
#include "kill_harness.hpp"
#include "memory_store.hpp"
#include "tessera/base/error.hpp"
#include "tessera/plugin/communicator.hpp"
#include "tessera/plugin/transport.hpp"

namespace tessera {
namespace {

using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;

// The transport's timeout, which bounds the child's connect: a failure must come long before it.
constexpr auto kTransportTimeout = 20s;
constexpr auto kFailsWithin = 5s;

// The first split's child of color 0 meets here, in the group's store.
std::shared_ptr<Store> first_split_child_store(std::shared_ptr<Store> group_store) {
  return std::make_shared<PrefixStore>("split0/color0", std::move(group_store));
}

// Waits until `rank` of the group whose store is `group_store` has begun connecting the first
// split's child.
void await_child_connect_started(const std::shared_ptr<Store>& group_store, int rank) {
  (void)first_split_child_store(group_store)
      ->get("shm/connects/rank" + std::to_string(rank), kTransportTimeout);
}

// Runs rank `rank`'s part of split(0, rank)'s exchange on `group`, as the split itself does.
void run_split_exchange(Communicator& group, int rank) {
  std::vector<std::int32_t> mine{0, rank};
  std::vector<std::int32_t> all(2 * static_cast<std::size_t>(group.size()));
  group.all_gather(view_of(std::span(mine)), view_of(std::span(all)))->wait(kTransportTimeout);
}

std::map<std::string, std::string> shm_options() {
  return {{"timeout", std::to_string(std::chrono::milliseconds(kTransportTimeout).count()) + "ms"}};
}

// Two forked ranks; `victim` exits between the exchange and the child's connect. The survivor
// reports what its split threw and how long it took.
class ShmSplitDeathTest : public ::testing::TestWithParam<int> {};

TEST_P(ShmSplitDeathTest, ARankThatDiesBeforeAttachingToTheChildFailsTheOthersSplitAtOnce) {
  const int victim = GetParam();
  const int survivor = 1 - victim;
  const auto folder =
      std::filesystem::temp_directory_path() / ("tessera_shm_split_" + std::to_string(::getpid()));
  std::filesystem::remove_all(folder);
  std::vector<int> pids;
  std::string report;
  {
    kill_test::Workers workers;
    workers.start(
        [&](int rank, int report_fd) {
          const auto say = [&](const std::string& line) {
            const std::string text = line + "\n";
            (void)!::write(report_fd, text.data(), text.size());
          };
          try {
            const auto plugins = fault_test::load_worker_plugins("shm", shm_options(), folder);
            auto group = plugins->transport->connect(plugins->store, rank, 2, kTransportTimeout);
            if (rank == victim) {
              run_split_exchange(*group, rank);
              await_child_connect_started(plugins->store, survivor);
              ::_exit(0);  // dies without ever attaching to the child
            }
            const auto started = Clock::now();
            try {
              (void)group->split(0, rank);
              say("split succeeded");
            } catch (const TransportError& e) {
              const auto ms =
                  std::chrono::duration_cast<std::chrono::milliseconds>(Clock::now() - started);
              say("TransportError " + std::to_string(ms.count()) + " " + e.what());
            } catch (const Timeout& e) {
              say(std::string("Timeout ") + e.what());
            }
          } catch (const std::exception& e) {
            say(std::string("error ") + e.what());
          }
          ::_exit(0);
        },
        2);
    pids = workers.pids();
    report = kill_test::read_line(workers.report_fd(survivor), kTransportTimeout + 10s);
  }
  std::filesystem::remove_all(folder);
  ASSERT_EQ(report.rfind("TransportError ", 0), 0U) << report;
  const long ms = std::stol(report.substr(std::string("TransportError ").size()));
  EXPECT_LT(std::chrono::milliseconds(ms), kFailsWithin) << report;
  EXPECT_NE(report.find("rank " + std::to_string(victim) + " (pid "), std::string::npos) << report;
  EXPECT_NE(report.find(") died"), std::string::npos) << report;
  EXPECT_TRUE(fault_test::shm_segments_of(pids).empty());
}

// Victim 1: the survivor is the child's rank 0, waiting for it to attach to the segment it
// created. Victim 0: the survivor waits for the segment's name, which the victim never
// publishes.
std::string victim_name(const ::testing::TestParamInfo<int>& victim) {
  return "victim" + std::to_string(victim.param);
}
INSTANTIATE_TEST_SUITE_P(EitherRank, ShmSplitDeathTest, ::testing::Values(1, 0), victim_name);

// A rank alive but never attaching (stopped; an elastic run sees its lease end): the group
// aborted while the other rank connects the child ends that connect at once, with the abort's
// reason.
TEST(ShmSplitAbortTest, AnAbortOfTheGroupWhileItsSplitsChildConnectsEndsThatConnect) {
  PluginRegistry registry;
  registry.scan_directory(TESSERA_PLUGIN_DIR);
  auto transport = registry.create<Transport>(
      "shm", fault_test::options_for(registry, PluginKind::transport, "shm", shm_options()));
  auto store = memory::make_memory_store();
  auto connecting = std::async(std::launch::async,
                               [&] { return transport->connect(store, 1, 2, kTransportTimeout); });
  auto rank0 = transport->connect(store, 0, 2, kTransportTimeout);
  auto rank1 = connecting.get();

  auto split = std::async(std::launch::async, [&] {
    const auto started = Clock::now();
    try {
      (void)rank0->split(0, 0);
      return std::string("split succeeded");
    } catch (const TransportError& e) {
      const auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(Clock::now() - started);
      return "TransportError " + std::to_string(ms.count()) + " " + e.what();
    } catch (const Timeout& e) {
      return std::string("Timeout ") + e.what();
    }
  });
  run_split_exchange(*rank1, 1);
  await_child_connect_started(store, 0);
  rank0->abort("worker w1's lease ended");
  const auto report = split.get();
  ASSERT_EQ(report.rfind("TransportError ", 0), 0U) << report;
  const long ms = std::stol(report.substr(std::string("TransportError ").size()));
  EXPECT_LT(std::chrono::milliseconds(ms), kFailsWithin) << report;
  EXPECT_NE(report.find("worker w1's lease ended"), std::string::npos) << report;
  EXPECT_TRUE(fault_test::shm_segments_of({::getpid()}).empty());
}

}  // namespace
}  // namespace tessera
