#pragma once
// Tracing: what one rank did and when, kept as Chrome trace events (docs/tracing.md).
//
// The trainer creates one Recorder per rank when [train] trace_file is set and installs it on
// the rank's thread for the length of Trainer::run(); code on that thread (the layer runner, a
// strategy, any plugin) marks what it does with a Span. With no recorder installed a Span costs
// one thread-local load and a branch, so instrumentation stays in place in every build. Under
// the `local` transport the ranks are threads of one process, which is why the recorder is per
// thread and not per process. A thread the rank starts itself (a progress thread, a TBB task)
// has no recorder installed: it records through an explicit Recorder* (Span's second form) or
// installs one with ScopedRecorder.

#include <array>
#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <initializer_list>
#include <mutex>
#include <span>
#include <string>
#include <thread>
#include <vector>

namespace tessera::trace {

using Clock = std::chrono::steady_clock;

// One integer argument of an event, shown in the viewer's details pane. The key is kept as a
// pointer: pass a string literal. An Arg with a null key is left out (an optional label).
struct Arg {
  const char* key = nullptr;
  std::int64_t value = 0;
};

inline constexpr std::size_t kMaxArgs = 4;  // further arguments of one event are dropped
inline constexpr std::size_t kDefaultMaxEvents = 1'000'000;

// The events of one rank, in memory until write(). Thread-safe: any thread may record, and
// each thread gets its own track (tid) in the output. Event names, categories and argument
// keys are kept as pointers, never copied: pass string literals.
//
// Bounded: at most max_events events are kept (about 112 bytes each); later ones are dropped
// and counted, except the end of an async event whose begin was kept, so that begin/end pairs
// always match.
class Recorder {
 public:
  // `rank` becomes the pid of every event, so that merged traces show one process per rank.
  explicit Recorder(int rank, std::size_t max_events = kDefaultMaxEvents);
  Recorder(const Recorder&) = delete;
  Recorder& operator=(const Recorder&) = delete;

  [[nodiscard]] int rank() const noexcept { return rank_; }
  // Whether new events are kept. A recorder starts inactive; the trainer switches it per step
  // (the step window). Events already begun (a Span, an async begin) are completed either way.
  [[nodiscard]] bool active() const noexcept { return active_.load(std::memory_order_relaxed); }
  void set_active(bool active) noexcept { active_.store(active, std::memory_order_relaxed); }
  // Time zero of the output. The trainer takes it right after a barrier at the start of run(),
  // so that every rank's file shares one time axis (to the barrier's skew), even across hosts.
  void set_origin(Clock::time_point origin) noexcept { origin_ = origin; }

  // A complete event ("X") on the calling thread's track, [begin, end).
  void complete(const char* name, const char* category, Clock::time_point begin,
                Clock::time_point end, std::span<const Arg> args) noexcept;
  // An async event in flight ("b" now, "e" at end_async): operations that overlap the thread's
  // work (a collective from issue to completion). Returns the id end_async takes, or 0 when the
  // event was not kept (inactive or full); end_async(…, 0, …) does nothing. end_async may run on
  // any thread, once per id.
  [[nodiscard]] std::uint64_t begin_async(const char* name, const char* category,
                                          std::span<const Arg> args) noexcept;
  void end_async(const char* name, const char* category, std::uint64_t id,
                 std::span<const Arg> args) noexcept;
  // A point in time ("i") on the calling thread's track, e.g. where a run failed.
  void instant(const char* name, const char* category, std::span<const Arg> args) noexcept;
  // Names the calling thread's track in the viewer ("rank 0", "optimizer worker"). The first
  // thread that records or is named gets tid 0.
  void name_thread(const std::string& name);

  [[nodiscard]] std::size_t event_count() const;
  [[nodiscard]] std::size_t dropped_count() const;

  // Writes the Chrome trace-event JSON ({"traceEvents": [...], "otherData": {...}}) to `path`
  // atomically (a temporary sibling, then rename), with `other` (a JSON object's members, e.g.
  // "status") added to otherData. Safe while other threads still record (they are then in or
  // out). Throws Error (tessera/base/error.hpp) naming the path when it cannot be written.
  void write(const std::filesystem::path& path, const std::string& other_data_json) const;

 private:
  struct Event {
    const char* name;
    const char* category;
    std::int64_t ts_ns;   // since the clock's epoch; origin_ is subtracted when written
    std::int64_t dur_ns;  // "X" only
    std::uint64_t id;     // "b"/"e" only
    std::uint32_t thread;
    char phase;
    std::uint8_t arg_count;
    std::array<Arg, kMaxArgs> args;
  };
  // One event as JSON, its timestamp made relative to `origin_ns`.
  static void append_event(std::string& out, const Event& e, const std::string& pid,
                           std::int64_t origin_ns);
  // Requires mutex_. The calling thread's tid, registering it on first use.
  std::uint32_t thread_index_locked();
  void append_locked(const char* name, const char* category, char phase, Clock::time_point ts,
                     std::int64_t dur_ns, std::uint64_t id, std::span<const Arg> args, bool always);

  const int rank_;
  const std::size_t max_events_;
  std::atomic<bool> active_{false};
  Clock::time_point origin_;
  mutable std::mutex mutex_;
  // Chunks of kChunkEvents, so that growing never copies what is recorded (nor touches the
  // memory twice, which costs more than the copy on a busy host).
  static constexpr std::size_t kChunkEvents = 8192;
  std::vector<std::vector<Event>> chunks_;
  std::size_t event_total_ = 0;
  std::vector<std::pair<std::thread::id, std::string>> threads_;  // index: tid
  std::size_t dropped_ = 0;
  std::uint64_t next_id_ = 1;
};

namespace detail {
// The recorder installed on this thread. Defined in libtessera, the one instance every plugin
// sees; constant-initialised, so reading it is a plain TLS access with no guard.
extern constinit thread_local Recorder* installed_recorder;
}  // namespace detail

// The recorder installed on the calling thread, or nullptr.
[[nodiscard]] inline Recorder* current() noexcept {
  return detail::installed_recorder;
}

// Installs `recorder` (nullptr: none) on the calling thread for this object's lifetime and
// puts the previous one back after. The recorder must outlive this object.
class ScopedRecorder {
 public:
  explicit ScopedRecorder(Recorder* recorder) noexcept : previous_(detail::installed_recorder) {
    detail::installed_recorder = recorder;
  }
  ~ScopedRecorder() { detail::installed_recorder = previous_; }
  ScopedRecorder(const ScopedRecorder&) = delete;
  ScopedRecorder& operator=(const ScopedRecorder&) = delete;

 private:
  Recorder* previous_;
};

// A complete event from construction to destruction, e.g.
//   trace::Span span("forward", "compute", {{"layer", 3}, {"micro_batch", 1}});
// on the calling thread's installed recorder, or on an explicit one (a background thread's).
// Kept only if the recorder is active at construction. Not movable: it lives in one scope.
class Span {
 public:
  Span(const char* name, const char* category, std::initializer_list<Arg> args = {}) noexcept
      : Span(current(), name, category, args) {}
  Span(Recorder* recorder, const char* name, const char* category,
       std::initializer_list<Arg> args = {}) noexcept {
    if (recorder != nullptr && recorder->active()) start(recorder, name, category, args);
  }
  ~Span() {
    if (recorder_ != nullptr) finish();
  }
  Span(const Span&) = delete;
  Span& operator=(const Span&) = delete;

 private:
  void start(Recorder* recorder, const char* name, const char* category,
             std::initializer_list<Arg> args) noexcept;
  void finish() noexcept;

  Recorder* recorder_ = nullptr;
  const char* name_ = nullptr;
  const char* category_ = nullptr;
  Clock::time_point begin_;
  std::array<Arg, kMaxArgs> args_{};
  std::uint8_t arg_count_ = 0;
};

}  // namespace tessera::trace
