#include "group.hpp"

#include <sched.h>

#include <algorithm>
#include <cstring>
#include <thread>

#include "futex.hpp"
#include "tessera/base/error.hpp"

namespace tessera::shm {

namespace {

std::string format_ms(Duration d) {
  return std::to_string(d.count()) + " ms";
}

}  // namespace

Group::Group(Segment segment, int rank, int size, Settings settings, PeerWatch watch)
    : segment_(std::move(segment)),
      rank_(rank),
      size_(size),
      settings_(settings),
      watch_(std::move(watch)),
      // More ranks than cores: a spinning rank would hold the core its peer needs.
      oversubscribed_(static_cast<unsigned>(size) >
                      std::max(1u, std::thread::hardware_concurrency())),
      // Where ranks sleep often, a fence per sleep costs more than a locked store per publish.
      release_publish_(!oversubscribed_ && asymmetric_fence_ready()),
      seen_progress_(static_cast<std::size_t>(size), 0),
      peer_beats_(static_cast<std::size_t>(size)) {
  if (settings_.stall_timeout.count() > 0) heartbeat_ = std::thread([this] { beat(); });
}

Group::~Group() {
  {
    std::lock_guard lock(heartbeat_mutex_);
    stopping_ = true;
  }
  heartbeat_stop_.notify_all();
  if (heartbeat_.joinable()) heartbeat_.join();
}

void Group::beat() {
  // A separate thread, not the operation path: a rank busy computing for minutes between two
  // collectives still beats, so only a process that does not run at all is called stalled.
  const auto period = std::clamp<Duration>(settings_.stall_timeout / 10, Duration(1),
                                           std::chrono::milliseconds(1000));
  auto& heartbeat = segment_.rank_slot(rank_).heartbeat;
  std::unique_lock lock(heartbeat_mutex_);
  while (!stopping_) {
    heartbeat.fetch_add(1, std::memory_order_relaxed);
    heartbeat_stop_.wait_for(lock, period);
  }
}

void Group::check_stalled(std::string_view op, int peer,
                          std::chrono::steady_clock::time_point now) {
  if (settings_.stall_timeout.count() <= 0 || peer == rank_) return;
  auto& seen = peer_beats_[static_cast<std::size_t>(peer)];
  const auto value = segment_.rank_slot(peer).heartbeat.load(std::memory_order_relaxed);
  if (value == 0) return;  // a peer running without the watchdog never beats
  if (!seen.seen || value != seen.value) {
    seen = {value, now, true};
    return;
  }
  if (now - seen.since < settings_.stall_timeout) return;
  const auto silent = std::chrono::duration_cast<Duration>(now - seen.since);
  fail(FailureKind::aborted, peer,
       "rank " + std::to_string(peer) + " (pid " + std::to_string(watch_.pid(peer)) +
           ") made no progress for " + format_ms(silent) + " (stall_timeout " +
           format_ms(settings_.stall_timeout) + "): its process is stopped or frozen; rank " +
           std::to_string(rank_) + " was waiting for it in " + std::string(op) + " #" +
           std::to_string(operations_.load(std::memory_order_relaxed)),
       true);
  throw_failure(op);
}

std::string Group::ranks_not_arrived(int waiting_for) const {
  if (!await_all_target_) return "rank " + std::to_string(waiting_for);
  std::vector<int> late;
  for (int r = 0; r < size_; ++r) {
    if (r != rank_ && segment_.rank_slot(r).progress.load() < *await_all_target_) late.push_back(r);
  }
  if (late.empty()) late.push_back(waiting_for);
  std::string text = late.size() == 1 ? "rank " : "ranks ";
  for (std::size_t i = 0; i < late.size(); ++i) text += (i ? ", " : "") + std::to_string(late[i]);
  return text;
}

void Group::relax(std::int64_t poll) const noexcept {
  // The first polls pause: a peer on another core answers within a few microseconds. After
  // that, yield: when the peer shares this core (another job holds the other one) spinning
  // on `pause` would burn the whole spin budget (~0.5 ms at 20000 polls) before the peer can
  // run, while a yield hands it the core at once and costs a peer elsewhere almost nothing.
  constexpr std::int64_t kPausePolls = 2048;
  if (oversubscribed_ || poll >= kPausePolls) {
    ::sched_yield();
    return;
  }
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#endif
}

void Group::publish(std::uint64_t progress) noexcept {
  auto& slot = segment_.rank_slot(rank_).progress;
  // Ordered before the sleeper count is read: by the sleepers' fence, or by seq_cst.
  if (release_publish_) {
    slot.store(progress, std::memory_order_release);
  } else {
    slot.store(progress);
  }
  notify();
}

void Group::notify() noexcept {
  Header& header = segment_.header();
  if (header.sleepers.load() == 0) return;
  header.epoch.fetch_add(1);
  futex_wake_all(header.epoch);
}

bool Group::reached(int peer, std::uint64_t target) noexcept {
  auto& seen = seen_progress_[static_cast<std::size_t>(peer)];
  if (seen >= target) return true;
  seen = segment_.rank_slot(peer).progress.load(std::memory_order_acquire);
  return seen >= target;
}

void Group::await_rank(int peer, std::uint64_t target, std::string_view op, Deadline deadline) {
  await([&] { return reached(peer, target) ? -1 : peer; }, op, deadline);
}

void Group::await_all(std::uint64_t target, std::string_view op, Deadline deadline) {
  int next = 0;  // ranks below `next` are known to have arrived; progress only grows
  await_all_target_ = target;
  struct Reset {
    std::optional<std::uint64_t>& target;
    ~Reset() { target.reset(); }
  } reset{await_all_target_};
  await(
      [&] {
        for (; next < size_; ++next) {
          if (next != rank_ && !reached(next, target)) return next;
        }
        return -1;
      },
      op, deadline);
}

void Group::futex_sleep(std::uint32_t seen_epoch, Deadline deadline) noexcept {
  const auto left =
      std::chrono::duration_cast<Duration>(deadline - std::chrono::steady_clock::now());
  const auto nap = std::clamp(left, Duration(1), settings_.poll_interval);
  futex_wait(segment_.header().epoch, seen_epoch, nap);
}

void Group::fail_for_dead_rank(int dead, std::string_view op) {
  fail(FailureKind::died, dead,
       "rank " + std::to_string(dead) + " (pid " + std::to_string(watch_.pid(dead)) + ") died",
       true);
  throw_failure(op);
}

void Group::throw_if_failed_or_exited(const std::vector<int>& ranks, std::string_view op) {
  throw_if_failed(op);
  for (const int rank : ranks) {
    if (watch_.exited(rank)) fail_for_dead_rank(rank, op);
  }
}

void Group::check_health(std::string_view op, int waiting_for, Deadline deadline) {
  throw_if_failed(op);
  const auto now = std::chrono::steady_clock::now();
  if (now - last_liveness_check_ >= settings_.poll_interval) {
    last_liveness_check_ = now;
    if (const auto dead = watch_.find_dead()) fail_for_dead_rank(*dead, op);
  }
  check_stalled(op, waiting_for, now);
  const auto where =
      " in " + std::string(op) + " #" + std::to_string(operations_.load(std::memory_order_relaxed));
  {
    std::lock_guard lock(failure_mutex_);
    waiting_for_ = ranks_not_arrived(waiting_for) + where;
    waiting_operation_ = operations_.load(std::memory_order_relaxed);
  }
  if (now >= caller_deadline_) {
    fail(FailureKind::aborted, rank_,
         "rank " + std::to_string(rank_) + ": Work::wait timed out while waiting for " +
             ranks_not_arrived(waiting_for) + where,
         true);
    throw_failure(op);
  }
  if (now >= deadline) {
    fail(FailureKind::aborted, waiting_for,
         "timed out after " + format_ms(settings_.timeout) + " waiting for " +
             ranks_not_arrived(waiting_for) + where + " (not arrived)",
         true);
    throw_failure(op);
  }
}

void Group::fail(FailureKind kind, std::optional<int> peer, const std::string& reason,
                 bool publish) noexcept {
  {
    std::lock_guard lock(failure_mutex_);
    if (failed_.load()) return;
    failed_peer_ = peer;
    failure_reason_ = reason;
    failed_.store(true, std::memory_order_release);
  }
  if (publish) {
    segment_.record_failure(kind, peer.value_or(rank_), reason);
    return;
  }
  // Wake everyone, here and in other processes, so they notice at once.
  Header& header = segment_.header();
  header.epoch.fetch_add(1);
  futex_wake_all(header.epoch);
}

void Group::throw_if_failed(std::string_view op) {
  if (failed()) throw_failure(op);
  // Another rank's verdict (a dead peer, an abort, a timeout) holds here too.
  Header& header = segment_.header();
  const auto kind = static_cast<FailureKind>(header.failure.load(std::memory_order_acquire));
  if (kind == FailureKind::died || kind == FailureKind::aborted) {
    fail(kind, header.failed_rank, header.failure_reason, false);
    throw_failure(op);
  }
}

std::string Group::waiting_for() const {
  std::lock_guard lock(failure_mutex_);
  // Only about the operation running now: an earlier wait says nothing about this one.
  return waiting_operation_ == operations_.load(std::memory_order_relaxed) ? waiting_for_
                                                                           : std::string();
}

void Group::throw_failure(std::string_view op) {
  std::lock_guard lock(failure_mutex_);
  throw TransportError("shm " + std::string(op) + " (rank " + std::to_string(rank_) + " of " +
                           std::to_string(size_) + "): " + failure_reason_,
                       failed_peer_, std::string(op));
}

}  // namespace tessera::shm
