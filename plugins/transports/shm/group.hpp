#pragma once
// Group: one connected set of ranks over one segment — the state every algorithm shares: the
// progress protocol, waiting (spin, then futex sleep with liveness checks), and failure.

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include "futex.hpp"
#include "peer_watch.hpp"
#include "segment.hpp"
#include "settings.hpp"
#include "tessera/transport_kit/staged_collectives.hpp"
#include "tessera/transport_kit/transport_support.hpp"

namespace tessera::shm {

// The progress protocol of tessera/transport_kit/staged_collectives.hpp: progress = 3 * step +
// phase.
using staging::kFirstStep;
using staging::reduced;
using staging::released;
using staging::staged;
// While no caller waits, a wait polls spin_count / kBackgroundSpinDivisor times before sleeping.
inline constexpr std::int64_t kBackgroundSpinDivisor = 10;

class Group {
 public:
  // Starts the heartbeat thread (unless settings.stall_timeout is 0); the destructor joins it.
  Group(Segment segment, int rank, int size, Settings settings, PeerWatch watch);
  ~Group();
  Group(const Group&) = delete;
  Group& operator=(const Group&) = delete;

  [[nodiscard]] int rank() const noexcept { return rank_; }
  [[nodiscard]] int size() const noexcept { return size_; }
  [[nodiscard]] const Segment& segment() const noexcept { return segment_; }
  [[nodiscard]] const Settings& settings() const noexcept { return settings_; }

  // The step counter of collectives: every rank issues the same collectives in the same order,
  // so steps agree. Used only by the one thread running operations at a time.
  [[nodiscard]] std::uint64_t next_step() noexcept { return step_++; }
  // Numbers the operations this communicator runs (1, 2, ...), for errors: every rank issues
  // the same collectives in the same order, so the numbers agree. Called by the thread that
  // runs the operation, before running it.
  void begin_operation() noexcept { operations_.fetch_add(1, std::memory_order_relaxed); }

  // Makes this rank's progress (and every write before it) visible, waking sleepers.
  void publish(std::uint64_t progress) noexcept;
  // Wakes sleepers after some other shared write (point-to-point counters).
  void notify() noexcept;
  // Block until peer (or every peer) has reached `target` progress. A peer already seen there
  // costs no read of shared memory: its progress line is usually being rewritten by its owner,
  // and every read of it is a cache miss.
  void await_rank(int peer, std::uint64_t target, std::string_view op, Deadline deadline);
  void await_all(std::uint64_t target, std::string_view op, Deadline deadline);

  // Blocks until pending() returns -1; pending() otherwise returns the rank being waited for,
  // which timeouts and the stall watchdog name (a peer waited for whose heartbeat has not moved
  // for settings().stall_timeout). Spins settings().spin_count polls while a caller waits (a tenth
  // of that otherwise, see add_waiting_caller), then sleeps on the segment's futex (and spins again
  // after each wake-up), checking for abort, dead peers and the deadline at least every
  // poll_interval. Throws TransportError (and fails the group) on any of them.
  template <class Pending>
  void await(Pending&& pending, std::string_view op, Deadline deadline) {
    if (pending() < 0) return;
    deadline = std::min(deadline, caller_deadline_);
    for (;;) {
      const std::int64_t polls = waiting_callers_.load(std::memory_order_relaxed) > 0
                                     ? settings_.spin_count
                                     : settings_.spin_count / kBackgroundSpinDivisor;
      // Spinning yields under load, and a yield may take a while to come back: bound the spin
      // by poll_interval too, so that health checks (dead, stalled peers) keep their pace.
      const auto spin_start = std::chrono::steady_clock::now();
      for (std::int64_t i = 0; i < polls; ++i) {
        if (pending() < 0) return;
        relax(i);
        if ((i & 255) == 255 &&
            std::chrono::steady_clock::now() - spin_start >= settings_.poll_interval)
          break;
      }
      const int waiting_for = pending();
      if (waiting_for < 0) return;
      check_health(op, waiting_for, deadline);
      sleep_unless([&] { return pending() < 0; }, deadline);
    }
  }

  // Long spinning pays only while some thread of this rank has nothing better to do than
  // wait for the group: one blocked in Work::wait, running operations itself or waiting for
  // the progress thread to finish one. Otherwise the progress thread polls briefly (a peer a
  // phase behind is caught without a futex round trip) and then sleeps, leaving the core to
  // the caller's own computation (a DDP bucket all-reduce behind backward on a machine with
  // no spare core). +1 when a caller starts waiting, -1 when it stops.
  void add_waiting_caller(int delta) noexcept { waiting_callers_.fetch_add(delta); }

  // Failure: the first one wins; every later operation fails with it. `publish` tells the
  // other ranks through the segment (abort, a dead peer seen, a timeout).
  void fail(FailureKind kind, std::optional<int> peer, const std::string& reason,
            bool publish) noexcept;
  [[nodiscard]] bool failed() const noexcept { return failed_.load(std::memory_order_acquire); }
  // Throws this group's failure as a TransportError naming `op` (no-op while healthy).
  void throw_if_failed(std::string_view op);
  // For a wait on some of this group's ranks outside its operations (a split's child group
  // connecting): throws as throw_if_failed, and when the process of one of `ranks` has exited,
  // fails the group as a wait in it would and throws that. Called by the waiting thread.
  void throw_if_failed_or_exited(const std::vector<int>& ranks, std::string_view op);
  [[noreturn]] void throw_failure(std::string_view op);
  // What the thread running operations was last seen waiting for ("rank 1 in all_reduce #57"),
  // empty when it is not waiting; for a Work::wait timeout in another thread. Thread-safe.
  [[nodiscard]] std::string waiting_for() const;

  // While a thread blocked in Work::wait(timeout) runs operations itself, their waits also end
  // at that deadline (failing the group, as a Work timeout does). Set and read only by the
  // thread currently running the group's operations.
  void set_caller_deadline(Deadline deadline) noexcept { caller_deadline_ = deadline; }

 private:
  // Whether `peer` has reached `target`, reading its progress only if not seen there before.
  [[nodiscard]] bool reached(int peer, std::uint64_t target) noexcept;
  // Between two polls: a pause at first, then sched_yield (see group.cpp).
  void relax(std::int64_t poll) const noexcept;
  template <class Ready>
  void sleep_unless(Ready&& ready, Deadline deadline) {
    Header& header = segment_.header();
    header.sleepers.fetch_add(1);
    const std::uint32_t seen = header.epoch.load();
    if (release_publish_) sleeper_fence();
    if (!ready()) futex_sleep(seen, deadline);
    header.sleepers.fetch_sub(1);
  }
  void futex_sleep(std::uint32_t seen_epoch, Deadline deadline) noexcept;
  void check_health(std::string_view op, int waiting_for, Deadline deadline);
  // Fails the group because `dead`'s process exited, and throws that naming `op`.
  [[noreturn]] void fail_for_dead_rank(int dead, std::string_view op);
  // Fails the group if `peer`'s heartbeat has not moved for stall_timeout.
  void check_stalled(std::string_view op, int peer, std::chrono::steady_clock::time_point now);
  // The ranks not yet at await_all's target (just `waiting_for` in other waits), for errors.
  [[nodiscard]] std::string ranks_not_arrived(int waiting_for) const;
  void beat();

  Segment segment_;
  const int rank_;
  const int size_;
  const Settings settings_;
  const PeerWatch watch_;
  const bool oversubscribed_;
  // Publishers store with release ordering; sleepers fence (see asymmetric_fence_ready).
  const bool release_publish_;
  std::uint64_t step_ = kFirstStep;
  // The highest progress read from each rank so far; only the thread running operations
  // touches it.
  std::vector<std::uint64_t> seen_progress_;
  std::atomic<int> waiting_callers_{0};
  Deadline caller_deadline_ = Deadline::max();
  std::chrono::steady_clock::time_point last_liveness_check_{};
  std::atomic<std::uint64_t> operations_{0};  // written by the running thread only
  // The target of the await_all in progress, so that a timeout names every rank short of it.
  std::optional<std::uint64_t> await_all_target_;
  // Each peer's heartbeat as last read, and since when it has had that value; only the thread
  // running operations touches it.
  struct PeerBeat {
    std::uint64_t value = 0;
    std::chrono::steady_clock::time_point since{};
    bool seen = false;
  };
  std::vector<PeerBeat> peer_beats_;

  // The heartbeat thread: bumps this rank's RankSlot::heartbeat every stall_timeout / 10.
  std::mutex heartbeat_mutex_;
  std::condition_variable heartbeat_stop_;
  bool stopping_ = false;
  std::thread heartbeat_;

  std::atomic<bool> failed_{false};
  mutable std::mutex failure_mutex_;
  std::optional<int> failed_peer_;
  std::string failure_reason_;
  std::string waiting_for_;              // guarded by failure_mutex_
  std::uint64_t waiting_operation_ = 0;  // the operation waiting_for_ is about; same guard
};

}  // namespace tessera::shm
