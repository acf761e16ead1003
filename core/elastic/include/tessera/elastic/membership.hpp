#pragma once
// Who is in an elastic job's world, agreed generation by generation through the store: every
// worker holds a lease while it lives, and each generation's world is written exactly once, so
// every worker adopts the same members in the same rank order even when several propose at once.

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "tessera/base/time.hpp"
#include "tessera/plugin/store.hpp"

namespace tessera {

struct MembershipOptions {
  // Stable and unique in the job (the launcher's "node.local.restart"): letters, digits and
  // . _ - : @, at most 128 characters. Worlds list members by it.
  std::string worker_id;
  int min_workers = 1;
  int max_workers = 1;
  // How often the lease is renewed, and how long a worker that stopped renewing it still counts
  // as alive (the lease's ttl): the longest a hung worker can hold the others back.
  Duration heartbeat{1000};
  Duration failure_timeout{10000};
  // How long a participant waits for workers it believes alive but that are not ready yet (a
  // slow survivor, a hung one) before proposing without them; at most failure_timeout. For the
  // first world: how long it waits for more than min_workers while fewer than max_workers are
  // ready. 0 proposes at once what is ready.
  Duration settle_time{3000};
};

// While members form the next generation, how long one that is not ready may go without a
// heartbeat before the others stop waiting for it, though its lease has not ended: 4 heartbeats,
// at least 500 ms, at most half of failure_timeout. A process that is gone beats no more, but
// its lease lasts failure_timeout unless someone removes it (the launcher does for its own
// workers; nobody does for a node that died whole); a live member, even a slow one, keeps
// beating from its own thread and is waited for up to settle_time as before.
[[nodiscard]] Duration regroup_silence(const MembershipOptions& options);

// The bounds on a job's world size. The first world's are the job's: every later world is
// stored with them, so that every member, however it was started, sees the same room.
struct JobLimits {
  int min_workers = 1;
  int max_workers = 1;
};

// One generation's world as stored: the same on every worker.
struct WorldView {
  std::int64_t generation = 0;
  std::vector<std::string> members;  // in rank order
  // Members that entered at this generation as newcomers: they hold no state of the previous
  // world and must receive it. Every member of the first world is one.
  std::vector<std::string> joined;
  // This worker's rank (its index in members); nullopt when the world was formed without it.
  std::optional<int> rank;
  // The job ended at this generation (Membership::finish): no members, nobody is admitted.
  bool finished = false;
  // Formed at a deadline with fewer than min_workers (BelowMinWorkers::stop): the job stops at
  // this generation. Its members only save the state; nobody is admitted to it or after it
  // (join() returns it, without a rank, to a newcomer).
  bool stopping = false;
  // The job's, as its first world was formed with (MembershipOptions of whoever formed it).
  JobLimits limits;

  [[nodiscard]] bool is_member() const noexcept { return rank.has_value(); }
  [[nodiscard]] int size() const noexcept { return static_cast<int>(members.size()); }
};

// What next_generation does when fewer than min_workers are ready at its deadline.
enum class BelowMinWorkers : std::uint8_t {
  fail,  // throws Timeout
  // Forms a last world of the members of the current generation that are ready (newcomers are
  // left out: they hold no state), marked `stopping`, so that the survivors can save the state
  // together before the job stops. Exactly one such world per generation, as for any other.
  stop,
};

// One worker's side of the agreement. Keys live under "membership/" in the store:
// workers/<id> (bound to the worker's lease: its liveness), beats/<id> (lease-bound, rewritten
// every heartbeat), world/<g> (generation g's members,
// written once by compare-and-set), ready/<g>/<id> (lease-bound: id takes part in forming g),
// changes/<g> (a counter bumped at each of those writes, so waiters wake on it) and generation
// (the newest generation formed, possibly lagging).
//
// Forming generation g+1: each participant marks itself ready, waits until every member of g it
// believes alive (registered, minus those it was told failed) is ready or settle_time passes
// (newcomers already ready are taken in, those still starting are not waited for; a member
// whose beat counter stood still for regroup_silence is not waited for either), then proposes the
// ready workers (the survivors of g in their old order, then newcomers by id, at most
// max_workers) with compare_set; whoever loses adopts what is stored. Members of a running world
// form the next one; newcomers only wait to be admitted, unless no member of the newest world is
// alive (a job restarted from scratch), when they form it themselves as for the first world.
//
// Thread-safety: join and next_generation are called from one thread at a time; lease_lost,
// world, departed, joiners_waiting and finish from any. A background thread, owned by the object,
// renews the lease. Errors: a store error passes through; LeaseExpired when this worker's lease
// ended (the others counted it gone: call join() to come back as a newcomer); Timeout naming what
// was awaited and who was missing. No call blocks past its deadline, beyond the store calls in
// flight then.
class Membership {
 public:
  // Checks the options (InvalidArgument naming the option). Does not touch the store; shares
  // ownership of it.
  Membership(std::shared_ptr<Store> store, MembershipOptions options);
  // Stops the heartbeat and revokes the lease: the others see this worker leave at once.
  ~Membership();
  Membership(const Membership&) = delete;
  Membership& operator=(const Membership&) = delete;

  // Enters the job as a newcomer and blocks until a world admits it. Registers this worker
  // first (grants a lease and starts renewing it) unless its lease is alive, so it is also how a
  // worker whose lease expired, or that a world was formed without, comes back. If no world
  // exists yet, it forms the first one with the others: once max_workers are ready, or once
  // min_workers are and settle_time has passed. Otherwise it waits for the members of the
  // running world to form the next one (they look at step boundaries, joiners_waiting), and
  // for the one after when a world is formed without it (full, or it came too late). Returns a
  // view with `finished` set, and no rank, when the job ended (finish) first, and a `stopping`
  // one without this worker when the job stopped below min_workers. Throws
  // Timeout at `deadline`, naming the world it waited on and why (full, fewer than
  // min_workers ready); InvalidArgument for a live member of the newest world.
  [[nodiscard]] WorldView join(Deadline deadline);

  // Called by every member of generation `current` (after a failure, or to admit joiners):
  // blocks until generation current+1 is formed and returns it; it may be formed without this
  // worker (it came later than settle_time), which then calls join() (unless that world is
  // `stopping`). `failed`: ids this worker believes gone (a transport error named them); it does
  // not wait for them, but one that marks itself ready anyway is alive and counted in. Throws
  // InvalidArgument when this worker is not a member of `current`. When fewer than min_workers
  // are ready at `deadline`: with BelowMinWorkers::fail, throws Timeout naming them and the
  // option to change; with stop, returns a `stopping` world of the ready members.
  [[nodiscard]] WorldView next_generation(std::int64_t current,
                                          const std::vector<std::string>& failed, Deadline deadline,
                                          BelowMinWorkers below = BelowMinWorkers::fail);

  // Whether a newcomer waits to enter after generation `current` and there is room for it
  // (fewer than max_workers members). Non-blocking (a few store reads), thread-safe. Members may
  // see it become true at different times: one rank asks and tells the others.
  [[nodiscard]] bool joiners_waiting(std::int64_t current);

  // The run ended in generation `current`: stores generation current+1 as finished, so that
  // newcomers waiting in join() (and any that come later) return a finished view instead of
  // forming a world of their own. Any member may call it; later calls change nothing.
  void finish(std::int64_t current);

  // Generation `generation`'s world as stored, nullopt if it is not formed (yet). Thread-safe.
  [[nodiscard]] std::optional<WorldView> world(std::int64_t generation) {
    return stored_world(generation);
  }
  // The members of `world` whose lease has ended (or that left): one store read. Thread-safe;
  // the elastic runtime's watcher asks it every heartbeat.
  [[nodiscard]] std::vector<std::string> departed(const WorldView& world);
  // Before this worker acts as a member (writes what only a member may, such as the run's
  // metrics): throws LeaseExpired when its lease ended. Free while the heartbeat's renewals are
  // answered (the lease is then surely alive); after half a lease without an answer (this
  // process was stopped and woken, and its heartbeat has not run yet, or the store is slow) it
  // reads its own registration, which the lease's end removes: gone, the lease is lost as a
  // renewal would have found. While renewals fail (the store is out) or the read fails, it
  // returns: the heartbeat's rules for an outage apply.
  void confirm_lease();
  // True once a renewal found the lease ended. Non-blocking, thread-safe.
  [[nodiscard]] bool lease_lost() const noexcept { return heartbeat_state_->lease_lost.load(); }
  // Once the lease is lost: how long the store had not answered this worker's renewals, when
  // they went unanswered (blocked or failing) for nearly the lease's ttl (failure_timeout) before
  // it ended. A lease lost so is the store's outage, not this worker's stall (a stalled worker
  // does not ask). nullopt otherwise. Non-blocking, thread-safe.
  [[nodiscard]] std::optional<Duration> store_silence() const;

  [[nodiscard]] const std::string& worker_id() const noexcept { return options_.worker_id; }

 private:
  // What the heartbeat thread shares with its Membership. Shared, so that a thread stuck in a
  // renewal against a store that does not answer can be left to end on its own: it holds what
  // it uses (see stop_heartbeat).
  struct HeartbeatState {
    std::mutex mutex;
    std::condition_variable wake;
    bool stop = false;
    bool done = false;        // the thread has returned
    std::string lease_error;  // the LeaseExpired message, once lease_lost
    // When the renewal under way, or the first of those failing since the store last answered,
    // began; empty while the store answers.
    std::optional<std::chrono::steady_clock::time_point> unanswered_since;
    std::chrono::steady_clock::time_point last_answered;  // the last renewal that got through
    std::optional<Duration> store_silence;                // see Membership::store_silence
    bool renewals_failing = false;  // the last renewal threw a store error (no answer)
    std::atomic<bool> lease_lost{false};
  };

  void register_worker();
  // Stops the heartbeat; true when its thread ended within a heartbeat (the store answers),
  // false when it was left to end on its own, still waiting for the store.
  bool stop_heartbeat() noexcept;
  static void heartbeat_loop(const std::shared_ptr<HeartbeatState>& state,
                             const std::shared_ptr<Store>& store, LeaseId lease,
                             const std::string& beat_key, Duration period, Duration ttl);
  // How long the store has not answered `state`'s renewals, when they went unanswered for
  // nearly a ttl (see store_silence); nullopt else. Called with state.mutex held.
  static std::optional<Duration> outage_of(const HeartbeatState& state, Duration period,
                                           Duration ttl);
  void throw_if_lease_lost();
  // Forms `generation` (or learns it): `survivors_of` is the world this worker was a member of
  // (nullopt for a newcomer).
  WorldView form(std::int64_t generation, const std::optional<WorldView>& survivors_of,
                 const std::vector<std::string>& failed, Deadline deadline, BelowMinWorkers below);
  std::optional<WorldView> stored_world(std::int64_t generation);
  void advance_generation_pointer(std::int64_t generation);
  // The newest generation formed (0: none yet).
  std::int64_t newest_generation();

  std::shared_ptr<Store> store_;
  MembershipOptions options_;
  LeaseId lease_{};
  std::shared_ptr<HeartbeatState> heartbeat_state_ = std::make_shared<HeartbeatState>();
  std::thread heartbeat_;
};

// For a launcher, which sees its workers' processes end before their leases do. Both read or
// change `job_store` (the store the members were given) under Membership's own keys.
// Marks worker `id` gone at once: the members forming the next world stop waiting for it.
void mark_worker_gone(Store& job_store, const std::string& id);
// Whether any worker whose id starts with `id_prefix` (e.g. a node's "n1.w") holds a live lease.
[[nodiscard]] bool any_worker_alive(Store& job_store, const std::string& id_prefix);
// Whether worker `id` holds a live lease (is registered and has not left or been marked gone).
[[nodiscard]] bool worker_alive(Store& job_store, const std::string& id);

}  // namespace tessera
