#pragma once
// Building blocks every transport shares, so that a transport writes only the synchronous body
// of each operation: deadlines, a Work completed by a worker thread, the per-communicator queue
// that runs operations in issue order, and the membership rule of split().

#include <chrono>
#include <condition_variable>
#include <deque>
#include <exception>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "tessera/base/time.hpp"
#include "tessera/plugin/work.hpp"

namespace tessera {

// Called when a Work times out: the ranks no longer agree on what runs next, so the
// communicator must be aborted. Must be thread-safe and must not block.
using AbortHandler = std::function<void(const std::string& reason)>;

// A Work finished by someone else (an OperationQueue worker) through complete().
// Thread-safe. wait(timeout) throws Timeout naming the operation and calls the abort handler.
class QueuedWork final : public Work {
 public:
  QueuedWork(std::string operation, Duration default_timeout, AbortHandler on_timeout);

  [[nodiscard]] bool test() override;
  void wait(Duration timeout) override;
  [[nodiscard]] std::exception_ptr exception() override;
  using Work::wait;

  // Marks the operation finished; `error` is null on success. Only the first call counts.
  void complete(std::exception_ptr error) noexcept;
  [[nodiscard]] const std::string& operation() const noexcept { return operation_; }

 protected:
  [[nodiscard]] Duration default_timeout() const override { return default_timeout_; }

 private:
  const std::string operation_;
  const Duration default_timeout_;
  const AbortHandler on_timeout_;
  std::mutex mutex_;
  std::condition_variable done_cv_;
  bool done_ = false;
  std::exception_ptr error_;
};

// One worker thread per communicator running submitted operations one at a time, in issue
// order, which is what Communicator promises. A body reports failure by throwing; the Work
// then holds that exception. Bodies must themselves honour deadlines and the transport's
// abort: the queue cannot interrupt a running body.
//
// Thread-safety: submit from one thread at a time (the communicator's contract); shutdown and
// the Works it returns are thread-safe.
class OperationQueue {
 public:
  OperationQueue(Duration default_timeout, AbortHandler abort);
  ~OperationQueue();
  OperationQueue(const OperationQueue&) = delete;
  OperationQueue& operator=(const OperationQueue&) = delete;

  // Queues body; returns at once. `operation` names it in errors ("all_reduce", "recv(tag 3)").
  std::shared_ptr<QueuedWork> submit(std::string operation, std::function<void()> body);

  // Fails every operation not yet started with `error`, aborts (through the handler) if one
  // is running so that it returns, and joins the worker. Later submits fail at once with
  // `error`. Idempotent; the destructor calls it with a TransportError.
  void shutdown(std::exception_ptr error) noexcept;

 private:
  struct Item {
    std::shared_ptr<QueuedWork> work;
    std::function<void()> body;
  };
  void run();

  const Duration default_timeout_;
  const AbortHandler abort_;
  std::mutex mutex_;
  std::condition_variable wake_;
  std::deque<Item> items_;
  bool running_body_ = false;
  std::exception_ptr stopped_;  // set by shutdown
  std::thread worker_;
};

// split(color, key): given every rank's (color, key) in old-rank order, the old ranks that
// form `rank`'s new group, ordered by (key, old rank). Empty when rank's color is negative.
// Position of `rank` in the result is its new rank.
[[nodiscard]] std::vector<int> split_group_members(
    const std::vector<std::pair<int, int>>& color_key, int rank);

}  // namespace tessera
