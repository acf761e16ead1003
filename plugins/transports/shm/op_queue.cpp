#include "op_queue.hpp"

#include <pthread.h>
#include <sched.h>

#include <algorithm>
#include <chrono>
#include <optional>
#include <utility>

#include "p2p.hpp"
#include "tessera/base/error.hpp"

namespace tessera::shm {

// ---- ShmWork ----------------------------------------------------------------------------

ShmWork::ShmWork(std::shared_ptr<OpQueue> queue, std::string operation)
    : queue_(std::move(queue)), operation_(std::move(operation)) {}

bool ShmWork::test() {
  std::lock_guard lock(queue_->mutex_);
  return done_;
}

void ShmWork::wait(Duration timeout) {
  const Deadline deadline = deadline_after(timeout);
  std::exception_ptr error;
  const bool finished = queue_->help_until(*this, deadline, error);
  if (!finished || (error && std::chrono::steady_clock::now() >= deadline)) {
    const auto late = queue_->group().waiting_for();
    const std::string reason = operation_ + " did not finish within " +
                               std::to_string(timeout.count()) + " ms (Work::wait)" +
                               (late.empty() ? std::string() : "; waiting for " + late);
    queue_->group().fail(FailureKind::aborted, queue_->group().rank(), reason, true);
    throw Timeout("shm " + reason);
  }
  if (error) std::rethrow_exception(error);
}

std::exception_ptr ShmWork::exception() {
  std::lock_guard lock(queue_->mutex_);
  return error_;
}

Duration ShmWork::default_timeout() const {
  return queue_->group().settings().timeout;
}

// ---- OpQueue ----------------------------------------------------------------------------

OpQueue::OpQueue(std::shared_ptr<Group> group) : group_(std::move(group)) {}

OpQueue::~OpQueue() {
  shutdown("communicator destroyed");
}

void OpQueue::start() {
  thread_ = std::thread([this] { worker(); });
}

std::shared_ptr<Work> OpQueue::submit(std::shared_ptr<OpQueue> self, std::string operation,
                                      std::function<void()> body) {
  auto work = std::make_shared<ShmWork>(std::move(self), std::move(operation));
  const auto now = std::chrono::steady_clock::now();
  {
    std::lock_guard lock(mutex_);
    items_.push_back({work, std::move(body), std::nullopt, now});
    wake_worker_if_needed(now);
  }
  return work;
}

std::shared_ptr<Work> OpQueue::submit_transfer(std::shared_ptr<OpQueue> self, std::string operation,
                                               Transfer transfer) {
  auto work = std::make_shared<ShmWork>(std::move(self), std::move(operation));
  transfer.work = work;
  const auto now = std::chrono::steady_clock::now();
  {
    std::lock_guard lock(mutex_);
    items_.push_back({work, {}, std::move(transfer), now});
    wake_worker_if_needed(now);
  }
  return work;
}

void OpQueue::wake_worker_if_needed(std::chrono::steady_clock::time_point now) {
  // Only a dense stream of operations is left to the poll: one issued after a pause (a DDP
  // bucket after the forward pass) wakes the thread at once rather than wait out a period.
  constexpr auto kDenseGap = std::chrono::microseconds(200);
  const bool dense = now - last_submit_ < kDenseGap;
  last_submit_ = now;
  ++submitted_;
  if (!(inline_streak_ && worker_polling_ && dense)) work_ready_.notify_one();
}

void OpQueue::shutdown(const std::string& reason) noexcept {
  {
    std::unique_lock lock(mutex_);
    if (stopping_ && !thread_.joinable()) return;
    stopping_ = true;
    // A running body returns promptly once the group has failed; it must not be cut off,
    // since it writes into the caller's buffers.
    if (!items_.empty() || running_)
      group_->fail(FailureKind::aborted, group_->rank(), reason, false);
  }
  changed_.notify_all();
  work_ready_.notify_one();
  if (thread_.joinable() && thread_.get_id() != std::this_thread::get_id()) thread_.join();
  std::unique_lock lock(mutex_);
  while (!items_.empty()) {
    auto work = std::move(items_.front().work);
    items_.pop_front();
    work->done_ = true;
    work->error_ = std::make_exception_ptr(TransportError(
        "shm " + work->operation() + ": " + reason, std::nullopt, work->operation()));
  }
  changed_.notify_all();
}

bool OpQueue::help_until(const ShmWork& work, Deadline deadline, std::exception_ptr& error) {
  group_->add_waiting_caller(1);
  struct Done {
    Group& group;
    ~Done() { group.add_waiting_caller(-1); }
  } done{*group_};
  std::unique_lock lock(mutex_);
  while (!work.done_) {
    if (run_next(lock, deadline)) continue;
    if (changed_.wait_until(lock, deadline) == std::cv_status::timeout && !work.done_) return false;
  }
  error = work.error_;
  return true;
}

void OpQueue::worker() {
  // The first poll comes soon, so that an operation nobody waits for (a DDP bucket behind
  // backward) starts nearly at once; while callers keep running everything themselves the
  // period doubles, since every wake-up takes a core from a rank on a machine with none spare.
  constexpr auto kFirstPoll = std::chrono::microseconds(200);
  constexpr auto kLastPoll = std::chrono::microseconds(2000);
  // An operation younger than this is left to the caller that issued it, which usually waits
  // on it at once: on a core shared with that caller, taking it would cost two context switches
  // (the caller sleeps on `changed_`, then is woken) where running it inline costs none. Once
  // this old, nobody is running it inline, and it is ours.
  constexpr auto kGrace = std::chrono::microseconds(20);
  std::unique_lock lock(mutex_);
  std::uint64_t seen = submitted_;
  auto period = kFirstPoll;
  while (!stopping_) {
    auto wait = std::chrono::steady_clock::duration::zero();
    if (!running_ && !items_.empty()) {
      const auto age = std::chrono::steady_clock::now() - items_.front().queued_at;
      if (age >= kGrace && run_next(lock)) {
        period = kFirstPoll;
        continue;
      }
      wait = kGrace - age;
    }
    // Poll only while submissions keep coming; otherwise sleep until submit wakes us, so an
    // idle communicator costs nothing and a slow stream of operations no more than before.
    const bool busy = submitted_ != seen;
    seen = submitted_;
    // Polling (a timed nap that submit need not cut short) or asleep until woken.
    std::optional<std::chrono::steady_clock::duration> nap;
    if (inline_streak_ && busy) {
      nap = period;
      period = std::min(2 * period, kLastPoll);
    } else if (wait > wait.zero()) {
      nap = wait;
    } else {
      period = kFirstPoll;
    }
    worker_polling_ = nap.has_value();
    work_ready_.wait_for(lock, nap.value_or(std::chrono::seconds(1)));
    worker_polling_ = false;
  }
}

bool OpQueue::run_next(std::unique_lock<std::mutex>& lock, Deadline caller_deadline) {
  if (running_ || items_.empty() || (stopping_ && std::this_thread::get_id() == thread_.get_id()))
    return false;
  running_ = true;
  inline_streak_ = std::this_thread::get_id() != thread_.get_id();
  Item item = std::move(items_.front());
  items_.pop_front();
  lock.unlock();
  group_->set_caller_deadline(caller_deadline);
  group_->begin_operation();
  std::exception_ptr error;
  if (item.transfer) {
    std::vector<Transfer> active;
    active.push_back(std::move(*item.transfer));
    run_transfers(active);
  } else {
    try {
      // A verdict published by another rank (abort, death, timeout) fails every later
      // operation, even one whose own synchronisation would happen to succeed.
      group_->throw_if_failed(item.work->operation());
      item.body();
    } catch (...) {
      error = error_for(*item.work, std::current_exception());
    }
  }
  group_->set_caller_deadline(Deadline::max());
  lock.lock();
  if (!item.transfer) {
    // Completed under the lock taken back anyway: one lock round trip less per operation.
    item.work->done_ = true;
    item.work->error_ = std::move(error);
  }
  running_ = false;
  changed_.notify_all();
  // What is left may be nobody's to run if the caller that ran this one stops helping now.
  if (!items_.empty()) work_ready_.notify_one();
  return true;
}

void OpQueue::run_transfers(std::vector<Transfer>& active) {
  Group& group = *group_;
  auto pull_queued = [&] {
    std::lock_guard lock(mutex_);
    while (!items_.empty() && items_.front().transfer) {
      active.push_back(std::move(*items_.front().transfer));
      items_.pop_front();
      group.begin_operation();
    }
  };
  try {
    Deadline deadline = deadline_after(group.settings().timeout);
    while (!active.empty()) {
      group.throw_if_failed(active.front().work->operation());
      pull_queued();
      if (advance_transfers(group, active)) {
        deadline = deadline_after(group.settings().timeout);
        for (Transfer& t : active)
          if (t.finished()) complete(*t.work, nullptr);
        std::erase_if(active, [](const Transfer& t) { return t.finished(); });
        continue;
      }
      // Nothing can move: wait for a peer, or for a new send/receive to join the batch.
      std::size_t queued = 0;
      group.await(
          [&] {
            {
              std::lock_guard lock(mutex_);
              queued = !items_.empty() && items_.front().transfer ? 1 : 0;
            }
            return queued ? -1 : transfers_blocked_on(group, active);
          },
          active.front().work->operation(), deadline);
    }
  } catch (...) {
    const auto original = std::current_exception();
    for (Transfer& t : active) complete(*t.work, error_for(*t.work, original));
    active.clear();
  }
}

std::exception_ptr OpQueue::error_for(const ShmWork& work, std::exception_ptr original) {
  if (!group_->failed()) {
    std::string what = "unknown error";
    try {
      std::rethrow_exception(original);
    } catch (const std::exception& e) {
      what = e.what();
    } catch (...) {
    }
    group_->fail(FailureKind::aborted, group_->rank(), work.operation() + " failed: " + what, true);
  }
  try {
    group_->throw_failure(work.operation());
  } catch (...) {
    return std::current_exception();
  }
}

void OpQueue::complete(ShmWork& work, std::exception_ptr error) {
  {
    std::lock_guard lock(mutex_);
    work.done_ = true;
    work.error_ = std::move(error);
  }
  changed_.notify_all();
}

}  // namespace tessera::shm
