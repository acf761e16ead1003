#pragma once
// Engine: the thread that owns one communicator's UCX worker. Operations run on it one at a
// time in issue order; a collective runs to its end there (its messages are an Exchange), a
// send or receive is only posted there and completes later while the engine keeps progressing
// the worker, so that a send never waits for its receive to be issued.
//
// Failures all end in one place, abort(): a peer's endpoint failing, a peer process on this
// host vanishing, a deadline passing, or abort() from the user. Every aborting rank announces it
// to every peer with a control message carrying the reason and the rank to blame, and waits
// briefly to hear theirs, so that the whole group fails fast with the same story.
//
// Stall watchdog: the engine thread sends every peer an empty heartbeat message every
// stall_timeout / 10 (at most every second), also between operations, while the user's thread
// computes; a wait that has not heard from the peer it waits for in stall_timeout fails the
// group, naming that peer, the operation and its number. A rank busy computing still beats, so
// only a process that does not run at all (SIGSTOP, frozen) or whose network is gone is stalled.

#include <atomic>
#include <condition_variable>
#include <deque>
#include <functional>
#include <list>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "peer_info.hpp"
#include "tessera/transport_kit/transport_support.hpp"
#include "ucx_worker.hpp"

namespace tessera::ucx {

// The transport's options as the engine uses them, every member filled from the resolved
// options by UcxTransport's constructor: the schema in plugin.cpp is where defaults are written.
struct Settings {
  Duration timeout{};
  std::size_t small_bytes = 0;         // up to this, one-round algorithms
  std::size_t segment_bytes = 0;       // pipeline unit of the large algorithms
  std::size_t segments_in_flight = 0;  // contribution receives posted per peer
  Duration liveness_interval{};        // how often same-host peer processes are checked
  // A peer waited for whose heartbeat has not arrived for this long fails the group; 0: never.
  Duration stall_timeout{};
  bool map_peers = false;              // large collectives through mapped memory, if possible
  std::size_t mapped_chunk_bytes = 0;  // per rank and round of the mapped algorithms
  std::size_t tcp_segment_bytes = 0;   // UCX's tcp segments, unless UCX_TCP_*_SEG_SIZE
};

class Exchange;
class MappedGroup;

class Engine {
 public:
  Engine(std::shared_ptr<UcxContext> context, int rank, int size, Settings settings);
  ~Engine();
  Engine(const Engine&) = delete;
  Engine& operator=(const Engine&) = delete;

  [[nodiscard]] const std::string& address() const noexcept { return worker_.address(); }
  [[nodiscard]] int rank() const noexcept { return rank_; }
  [[nodiscard]] int size() const noexcept { return size_; }
  [[nodiscard]] const Settings& settings() const noexcept { return settings_; }
  [[nodiscard]] const std::shared_ptr<UcxContext>& context() const noexcept { return context_; }
  [[nodiscard]] const PeerInfo& peer(int rank) const {
    return peers_[static_cast<std::size_t>(rank)];
  }

  // Connects to every peer and greets each one, then starts the engine thread. Blocking, on
  // the caller's thread. Throws Timeout naming the ranks that never answered by `deadline`.
  // `while_waiting`, when given, is called on every turn of the wait with the ranks not heard
  // from yet; what it throws ends the connect at once (a split's child watches the group it
  // splits from this way).
  void start(std::vector<PeerInfo> peers, Deadline deadline,
             const std::function<void(const std::vector<int>& silent)>& while_waiting = {});

  // Queue a collective body / a send / a receive. Returns at once.
  std::shared_ptr<Work> submit(std::string operation, std::function<void(Exchange&)> body);
  std::shared_ptr<Work> submit_send(std::string operation, int peer, const void* data,
                                    std::size_t bytes, std::uint32_t tag);
  std::shared_ptr<Work> submit_recv(std::string operation, int peer, void* data, std::size_t bytes,
                                    std::uint32_t tag);

  // Thread-safe, idempotent, non-blocking. `blame` is the rank at fault, when known.
  void abort(const std::string& reason, std::optional<int> blame) noexcept;

  // --- for Exchange, on the engine thread ---
  [[nodiscard]] UcxWorker& worker() noexcept { return worker_; }
  // Progresses the worker and handles failures and control messages; returns whether
  // anything happened. Never throws.
  bool service();
  // Throws the group's TransportError for `operation` if the group was aborted.
  void throw_if_aborted(const std::string& operation);
  // The stall watchdog, for a wait in `operation` (number `number`) on `peer`: if no heartbeat
  // of `peer` arrived for settings().stall_timeout, aborts the group naming it and returns
  // true (the caller then fails through throw_if_aborted). Never judges a peer it never heard
  // from (one running without the watchdog), and never throws.
  bool check_stalled(int peer, const std::string& operation, std::uint64_t number);
  // Whether `peer` announced that it destroyed its communicator.
  [[nodiscard]] bool departed(int peer) const { return departed_[static_cast<std::size_t>(peer)]; }
  // Hands over requests of a failed operation, to be finished and freed at teardown.
  void adopt(std::deque<Request>&& requests);
  // The group's mapped memory (mapped.hpp), set up through `x` by the first collective that
  // asks, which every rank issues alike; nullptr where the ranks cannot all map each other's
  // memory, or settings().map_peers is off. Released at teardown, before the endpoints close.
  [[nodiscard]] MappedGroup* mapped(Exchange& x);

 private:
  struct Command {
    std::shared_ptr<QueuedWork> work;
    std::function<void(Exchange&)> collective;  // empty for p2p
    bool is_send = false;
    int peer = -1;
    void* data = nullptr;
    std::size_t bytes = 0;
    std::uint32_t tag = 0;
  };
  struct Pending {
    std::shared_ptr<QueuedWork> work;
    Request request;
    Deadline deadline;
    std::uint64_t number = 0;  // this rank's count of sends and receives, for messages
  };
  // What abort() and the Works' timeout handlers share; outlives the engine if a Work does.
  struct Shared {
    std::mutex mutex;
    std::condition_variable wake;
    std::deque<Command> commands;
    bool stop = false;
    std::atomic<bool> aborted{false};
    std::string reason;
    std::optional<int> blame;
  };
  enum class Notice : std::int32_t { abort = 1, goodbye = 2 };

  void run();
  void execute(Command& command);
  void poll_pending(bool failing);
  void on_aborted();
  void await_abort_handshake();
  void teardown();
  void post_control_recv();
  void handle_control();
  void take_control();  // the notice control_ received
  // The watchdog's side on this rank: takes in the heartbeats that arrived and, when due, sends
  // its own to every peer. Cheap when nothing is due; does nothing once the worker is quiesced.
  void heartbeat();
  void post_heartbeat_recv();
  [[nodiscard]] bool watchdog_on() const noexcept {
    return settings_.stall_timeout.count() > 0 && size_ > 1 && !worker_.quiesced();
  }
  [[nodiscard]] Duration heartbeat_period() const noexcept;
  void send_notice(int peer, Notice kind, const std::string& text, std::optional<int> blame);
  void drain(std::deque<Request>& requests, Duration timeout);
  [[nodiscard]] std::shared_ptr<QueuedWork> make_work(std::string operation) const;
  [[nodiscard]] std::exception_ptr abort_error(const std::string& operation) const;

  std::shared_ptr<UcxContext> context_;
  const int rank_;
  const int size_;
  const Settings settings_;
  UcxWorker worker_;
  std::vector<PeerInfo> peers_;
  std::vector<bool> departed_;
  std::vector<bool> aborted_peers_;  // peers whose abort notice arrived
  // Peers known gone (their endpoint failed, their process on this host ended, or they stalled
  // past stall_timeout): an abort's handshake does not wait for their notice.
  std::vector<bool> lost_;
  std::shared_ptr<Shared> shared_ = std::make_shared<Shared>();

  // Engine-thread state.
  std::uint64_t sequence_ = 0;
  std::uint64_t p2p_count_ = 0;
  std::list<Pending> pending_;
  std::deque<Request> orphans_;
  std::deque<Request> notices_;
  std::deque<std::string> notice_payloads_;
  Request control_;
  std::string control_buffer_;
  bool aborted_handled_ = false;
  std::chrono::steady_clock::time_point next_liveness_check_{};
  // Watchdog: one heartbeat send per peer in flight at most (a stopped peer's queue must not
  // grow), the receive of any peer's heartbeat, and when each peer was last heard from.
  std::vector<Request> heartbeat_sends_;
  Request heartbeat_recv_;
  std::vector<std::chrono::steady_clock::time_point> last_heard_;
  std::vector<bool> heard_;
  std::chrono::steady_clock::time_point next_heartbeat_{};
  std::chrono::steady_clock::time_point last_heartbeat_{};
  std::unique_ptr<MappedGroup> mapped_;
  bool mapping_tried_ = false;
  std::thread thread_;
};

}  // namespace tessera::ucx
