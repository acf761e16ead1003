#include "tessera/transport_kit/transport_support.hpp"

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "blocked_call.hpp"
#include "tessera/base/error.hpp"

namespace tessera {
namespace {

using std::chrono::milliseconds;
constexpr Duration kLong = milliseconds(10000);

TEST(OperationQueue, RunsOperationsOneAtATimeInIssueOrder) {
  std::vector<int> order;
  std::atomic<int> running{0};
  bool overlapped = false;
  OperationQueue queue(kLong, nullptr);
  std::vector<std::shared_ptr<QueuedWork>> works;
  for (int i = 0; i < 20; ++i) {
    works.push_back(queue.submit("op" + std::to_string(i), [&, i] {
      if (running.fetch_add(1) != 0) overlapped = true;
      order.push_back(i);
      running.fetch_sub(1);
    }));
  }
  for (auto& work : works) work->wait(kLong);
  EXPECT_FALSE(overlapped);
  ASSERT_EQ(order.size(), 20U);
  for (int i = 0; i < 20; ++i) EXPECT_EQ(order[static_cast<std::size_t>(i)], i);
}

TEST(OperationQueue, ABodysExceptionIsRethrownByWaitAndReportedByException) {
  OperationQueue queue(kLong, nullptr);
  auto work = queue.submit("boom", [] { throw TransportError("peer 3 died", 3, "boom"); });
  EXPECT_THROW(work->wait(kLong), TransportError);
  EXPECT_TRUE(work->test());
  EXPECT_NE(work->exception(), nullptr);
  auto fine = queue.submit("fine", [] {});
  fine->wait();  // the default timeout
  EXPECT_EQ(fine->exception(), nullptr);
}

TEST(OperationQueue, WaitPastTheDeadlineThrowsTimeoutAndAbortsNamingTheOperation) {
  std::mutex mutex;
  std::condition_variable cv;
  bool released = false;
  std::string abort_reason;
  OperationQueue queue(kLong, [&](const std::string& reason) {
    std::lock_guard lock(mutex);
    abort_reason = reason;
    released = true;
    cv.notify_all();
  });
  // The body stands for a transport op blocked on a peer; the abort is what releases it.
  auto work = queue.submit("all_reduce", [&] {
    std::unique_lock lock(mutex);
    cv.wait_for(lock, kLong, [&] { return released; });
  });
  try {
    work->wait(milliseconds(20));
    FAIL() << "wait returned";
  } catch (const Timeout& e) {
    EXPECT_NE(std::string(e.what()).find("all_reduce"), std::string::npos) << e.what();
  }
  std::lock_guard lock(mutex);
  EXPECT_NE(abort_reason.find("all_reduce"), std::string::npos);
}

// Host work has no stream to join: wait_on_stream must not return before the bytes are in place,
// or a device kernel queued after it could read them half-written.
TEST(OperationQueue, HostWorkWaitsOnAStreamByFinishing) {
  std::mutex mutex;
  std::condition_variable cv;
  bool release = false;
  std::atomic<bool> finished{false};
  OperationQueue queue(kLong, nullptr);
  auto work = queue.submit("all_reduce", [&] {
    std::unique_lock lock(mutex);
    cv.wait_for(lock, kLong, [&] { return release; });
    finished = true;
  });
  EXPECT_FALSE(work->on_device());
  testing::BlockedCall wait;
  std::thread releaser([&] {
    EXPECT_TRUE(wait.wait_until_blocked()) << "wait_on_stream returned before the work finished";
    std::lock_guard lock(mutex);
    release = true;
    cv.notify_all();
  });
  wait.entering();
  work->wait_on_stream(Stream{Device::cuda(0), nullptr});
  wait.returned();
  EXPECT_TRUE(finished);
  releaser.join();
  // And errors come out of it like out of wait().
  auto failing = queue.submit("broadcast", [] { throw TransportError("gone", 1, "broadcast"); });
  EXPECT_THROW(failing->wait_on_stream(Stream{Device::cuda(0), nullptr}), TransportError);
}

TEST(OperationQueue, ShutdownFailsQueuedAndLaterOperations) {
  std::atomic<bool> started{false};
  std::atomic<bool> release{false};
  OperationQueue queue(kLong, [&](const std::string&) { release = true; });
  auto running = queue.submit("first", [&] {
    started = true;
    const auto deadline = std::chrono::steady_clock::now() + kLong;
    while (!release && std::chrono::steady_clock::now() < deadline) std::this_thread::yield();
  });
  auto queued = queue.submit("second", [] {});
  const auto deadline = std::chrono::steady_clock::now() + kLong;
  while (!started && std::chrono::steady_clock::now() < deadline) std::this_thread::yield();
  queue.shutdown(std::make_exception_ptr(TransportError("closing", std::nullopt, "")));
  EXPECT_TRUE(release);  // the running body was told to stop
  EXPECT_THROW(queued->wait(kLong), TransportError);
  EXPECT_NO_THROW(running->wait(kLong));
  auto late = queue.submit("third", [] {});
  EXPECT_THROW(late->wait(kLong), TransportError);
}

TEST(Deadline, AnEndlessTimeoutSaturatesInsteadOfOverflowing) {
  EXPECT_EQ(deadline_after(Duration::max()), Deadline::max());
  EXPECT_GT(deadline_after(milliseconds(5)), std::chrono::steady_clock::now());
}

TEST(SplitGroupMembers, OrdersByKeyThenOldRankAndLeavesOutNegativeColors) {
  const std::vector<std::pair<int, int>> color_key = {{0, 5}, {1, 0}, {0, 1}, {-1, 0}, {0, 1}};
  EXPECT_EQ(split_group_members(color_key, 0), (std::vector<int>{2, 4, 0}));
  EXPECT_EQ(split_group_members(color_key, 1), (std::vector<int>{1}));
  EXPECT_TRUE(split_group_members(color_key, 3).empty());
  EXPECT_THROW((void)split_group_members(color_key, 5), InvalidArgument);
}

}  // namespace
}  // namespace tessera
