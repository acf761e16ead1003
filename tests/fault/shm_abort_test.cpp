// Abort, Work timeouts and segment cleanup of the shm transport, with ranks as threads.
#include <gtest/gtest.h>
#include <unistd.h>

#include <chrono>
#include <future>
#include <thread>
#include <vector>

#include "fault_test_support.hpp"
#include "memory_store.hpp"
#include "tessera/base/error.hpp"
#include "tessera/plugin/communicator.hpp"
#include "tessera/plugin/transport.hpp"

namespace tessera {
namespace {

using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;

class ShmAbortTest : public ::testing::Test {
 protected:
  void SetUp() override { registry_.scan_directory(TESSERA_PLUGIN_DIR); }

  // A world of `size` ranks connected by one thread each.
  std::vector<std::shared_ptr<Communicator>> connect_world(int size) {
    auto transport = registry_.create<Transport>(
        "shm",
        fault_test::options_for(registry_, PluginKind::transport, "shm", {{"timeout", "20s"}}));
    auto store = memory::make_memory_store();
    std::vector<std::future<std::shared_ptr<Communicator>>> pending;
    for (int r = 0; r < size; ++r)
      pending.push_back(std::async(std::launch::async,
                                   [&, r] { return transport->connect(store, r, size, 20s); }));
    std::vector<std::shared_ptr<Communicator>> world;
    for (auto& f : pending) world.push_back(f.get());
    return world;
  }

  PluginRegistry registry_;
};

TEST_F(ShmAbortTest, AbortOnOneRankFailsThePeersPendingOperationNamingIt) {
  auto world = connect_world(2);
  std::vector<float> data(1 << 20, 1.0f);
  auto pending = world[1]->all_reduce(view_of(std::span(data)), ReduceOp::sum);
  // Probably waiting for rank 0 by now; issued and not complete either way, so the abort must
  // fail it. Nothing shows from outside where its queue thread is.
  std::this_thread::sleep_for(20ms);
  const auto start = Clock::now();
  world[0]->abort("test abort");
  try {
    pending->wait(5s);
    FAIL() << "all_reduce completed without its peer";
  } catch (const TransportError& e) {
    EXPECT_EQ(e.peer_rank(), 0);
    EXPECT_EQ(e.operation(), "all_reduce");
    EXPECT_NE(std::string(e.what()).find("test abort"), std::string::npos) << e.what();
  }
  EXPECT_LT(Clock::now() - start, 2s);
  EXPECT_THROW(world[0]->barrier()->wait(1s), TransportError);
}

TEST_F(ShmAbortTest, WorkWaitTimeoutThrowsTimeoutAndAbortsTheCommunicator) {
  auto world = connect_world(2);
  std::vector<float> data(16, 1.0f);
  auto lonely = world[1]->all_reduce(view_of(std::span(data)), ReduceOp::sum);
  EXPECT_THROW(lonely->wait(200ms), Timeout);
  EXPECT_THROW(world[1]->barrier()->wait(1s), TransportError);
  // The other rank learns it through the segment instead of waiting out its own timeout.
  EXPECT_THROW(world[0]->barrier()->wait(2s), TransportError);
}

TEST_F(ShmAbortTest, SegmentNamesAreGoneOnceEveryRankHasAttachedIncludingSplitGroups) {
  auto world = connect_world(4);
  EXPECT_TRUE(fault_test::shm_segments_of({::getpid()}).empty());
  std::vector<std::future<std::shared_ptr<Communicator>>> pending;
  for (int r = 0; r < 4; ++r)
    pending.push_back(std::async(std::launch::async, [&, r] {
      return world[static_cast<std::size_t>(r)]->split(r % 2, r);
    }));
  std::vector<std::shared_ptr<Communicator>> halves;
  for (auto& f : pending) halves.push_back(f.get());
  EXPECT_TRUE(fault_test::shm_segments_of({::getpid()}).empty());
  for (auto& half : halves) ASSERT_EQ(half->size(), 2);
  // The halves really work, independently of the world.
  std::vector<std::vector<float>> data(4, std::vector<float>(8));
  std::vector<std::shared_ptr<Work>> works;
  for (int r = 0; r < 4; ++r) {
    std::fill(data[static_cast<std::size_t>(r)].begin(), data[static_cast<std::size_t>(r)].end(),
              static_cast<float>(r));
    works.push_back(halves[static_cast<std::size_t>(r)]->all_reduce(
        view_of(std::span(data[static_cast<std::size_t>(r)])), ReduceOp::sum));
  }
  for (auto& w : works) w->wait(10s);
  EXPECT_EQ(data[0][0], 2.0f);  // ranks 0 and 2
  EXPECT_EQ(data[1][0], 4.0f);  // ranks 1 and 3
}

}  // namespace
}  // namespace tessera
