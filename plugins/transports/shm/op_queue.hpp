#pragma once
// The per-communicator queue: operations run one at a time in issue order, either on the
// communicator's progress thread or — the low-latency path — in the thread that waits on a
// Work, which then runs everything queued up to its own operation without a thread handoff.
// Consecutive sends and receives run as one batch that progresses them together, so that an
// exchange (everyone sends, then receives) cannot deadlock on bounded channels.

#include <chrono>
#include <condition_variable>
#include <cstddef>
#include <deque>
#include <exception>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "group.hpp"
#include "tessera/plugin/work.hpp"

namespace tessera::shm {

class OpQueue;

class ShmWork final : public Work {
 public:
  ShmWork(std::shared_ptr<OpQueue> queue, std::string operation);
  [[nodiscard]] bool test() override;
  void wait(Duration timeout) override;
  [[nodiscard]] std::exception_ptr exception() override;
  using Work::wait;
  [[nodiscard]] const std::string& operation() const noexcept { return operation_; }

 protected:
  [[nodiscard]] Duration default_timeout() const override;

 private:
  friend class OpQueue;
  const std::shared_ptr<OpQueue> queue_;
  const std::string operation_;
  bool done_ = false;  // guarded by the queue's mutex
  std::exception_ptr error_;
};

// A send or receive in flight: how far it has got. Owned by the batch that runs it.
struct Transfer {
  bool is_send = false;
  int peer = 0;
  std::uint32_t tag = 0;
  std::byte* data = nullptr;
  std::size_t bytes = 0;
  std::size_t moved = 0;  // bytes sent or received so far
  bool started = false;   // the first chunk has gone out (send) or matched (receive)
  std::shared_ptr<ShmWork> work;

  [[nodiscard]] bool finished() const noexcept { return started && moved == bytes; }
};

class OpQueue {
 public:
  explicit OpQueue(std::shared_ptr<Group> group);
  ~OpQueue();
  OpQueue(const OpQueue&) = delete;
  OpQueue& operator=(const OpQueue&) = delete;
  // Starts the progress thread; separate from construction so that `self` can be handed out.
  void start();

  std::shared_ptr<Work> submit(std::shared_ptr<OpQueue> self, std::string operation,
                               std::function<void()> body);
  std::shared_ptr<Work> submit_transfer(std::shared_ptr<OpQueue> self, std::string operation,
                                        Transfer transfer);

  // Fails every queued operation with the group's failure (failing the group with `reason`
  // first), waits for a running one to return, and joins the thread. Idempotent.
  void shutdown(const std::string& reason) noexcept;

  [[nodiscard]] Group& group() const noexcept { return *group_; }

 private:
  friend class ShmWork;
  struct Item {
    std::shared_ptr<ShmWork> work;
    std::function<void()> body;        // a collective, or
    std::optional<Transfer> transfer;  // a send or receive
    std::chrono::steady_clock::time_point queued_at;
  };

  // Runs operations until `work` is done, then hands out its error; false if the deadline
  // passed first.
  bool help_until(const ShmWork& work, Deadline deadline, std::exception_ptr& error);
  // Claims the next batch and runs it with the lock released; false if there was none to take.
  bool run_next(std::unique_lock<std::mutex>& lock, Deadline caller_deadline = Deadline::max());
  void run_transfers(std::vector<Transfer>& active);
  void complete(ShmWork& work, std::exception_ptr error);
  // Called with the lock held after queueing an item at `now`.
  void wake_worker_if_needed(std::chrono::steady_clock::time_point now);
  std::exception_ptr error_for(const ShmWork& work, std::exception_ptr original);
  void worker();

  const std::shared_ptr<Group> group_;
  std::mutex mutex_;
  std::condition_variable changed_;  // callers in help_until wait here
  // Only the progress thread waits here, so that completions a blocked caller is waiting for
  // do not wake it too: on a machine with no spare core each needless wake-up costs a rank
  // its core for a context switch.
  std::condition_variable work_ready_;
  // Waking the progress thread costs a futex call and a context switch per operation, wasted
  // when the caller waits at once and runs the operation itself. While callers do that
  // (inline_streak_), submit does not wake the thread while it polls the queue
  // (worker_polling_, see worker()), so an operation nobody waits for still starts within a
  // poll period; once submissions stop it sleeps until woken again. Nor does the thread take
  // an operation queued less than a grace period ago (see worker()): the caller is about to
  // run it, and taking it would send the caller to sleep on `changed_` instead.
  bool inline_streak_ = false;
  bool worker_polling_ = false;
  std::uint64_t submitted_ = 0;
  std::chrono::steady_clock::time_point last_submit_{};
  std::deque<Item> items_;
  bool running_ = false;
  bool stopping_ = false;
  std::thread thread_;
};

}  // namespace tessera::shm
