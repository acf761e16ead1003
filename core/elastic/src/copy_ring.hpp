#pragma once
// Copies of each rank's strategy state kept in the memory of other ranks, so that the
// survivors of a failure rebuild the whole state without reading a checkpoint (the Gemini idea).
//
// A strategy that declares TESSERA_REPLICATED_STATE (ddp) needs no copy at all: every rank
// holds the whole state, and a step that throws leaves it as the last completed step did. Such
// a ring (`replicated_state`) only notes, after each completed step, which step the strategy's live
// state is of; at a recovery, a survivor whose live state is of the newest step saves it and
// gives it to the others. Survivors differ by at most that one step: a step completes on a rank
// only once every rank took part in it, so none can be two steps ahead of another.
//
// Otherwise refresh() saves the strategy into memory (Strategy::save, as a checkpoint would) and
// keeps it as this rank's own copy, in a SnapshotArea: shared memory that the ranks of this host
// holding its copies open once per world, so that a copy for a rank on the same host costs no
// byte sent and outlives this rank's process (where /dev/shm refuses, or share_on_host is off,
// the copy is sent like one for another host). Two cases:
// - Every rank's copy holds the whole state (a strategy whose ranks hold the same state, like
//   ddp, writes it from every rank: CheckpointWriter::every_rank_writes_replicated_state).
//   Then any survivor restores the state alone, and nothing is sent.
// - Otherwise each rank sends its copy to the next `copies` ranks of a ring, over a channel
//   of its own (ElasticWorld::side_channel), without waiting: the copies land while the next
//   step runs on the world, and the next refresh waits for them before it sends the next ones.
//   The ring visits the failure domains (nodes) in turn (copy_ring_order), so a copy lives on
//   another node than its rank wherever there is one: a node that dies whole takes no state
//   with it that has a copy elsewhere.
//
// A failure may strike while some ranks finished a refresh and others did not, and while the
// copies of the newest refresh are still on their way. So each rank keeps its three newest own
// copies (two when it has no shared-memory area and sends nothing) and the two newest copies of
// others that arrived whole;
// recover() takes the newest step at which every rank of the old world has a copy somewhere
// among the survivors. A rank that started refresh s has finished step s with every rank,
// which each started after waiting for the copies of refresh s-2: that step is always whole.
#include <cstdint>
#include <exception>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <thread>
#include <vector>

#include "snapshot_area.hpp"
#include "tessera/plugin/communicator.hpp"
#include "tessera/plugin/strategy.hpp"
#include "tessera/plugin/work.hpp"
#include "tessera/strategy_kit/memory_state.hpp"

namespace tessera::elastic {

// Where the trainer was when the state was saved: after `step` steps, at sample `samples` of
// epoch `epoch` (the next sample to train).
struct TrainingPosition {
  std::int64_t step = 0;
  std::int64_t epoch = 0;
  std::int64_t samples = 0;
};

struct RecoveredState {
  // Null when some old rank's state is on no survivor (see missing).
  std::shared_ptr<const MemoryCheckpoint> state;
  TrainingPosition position;
  int previous_world_size = 0;
  std::vector<int> missing;  // old ranks whose state and every copy of it are gone
};

// What a rank of the new world holds of the old world's state at one of its own copies' steps.
struct HeldCopy {
  std::int64_t step = -1;
  bool whole = false;          // the copy holds every old rank's state
  std::vector<bool> can_give;  // by old rank: this rank holds that rank's state at `step`
};

// Who gives which old rank's state after a failure.
struct RecoveryPlan {
  // The newest step at which every old rank's state is held by some rank of the new world; -1
  // when there is none.
  std::int64_t step = -1;
  bool whole = false;        // a copy at `step` holds the whole state: giver[0] sends it alone
  std::vector<int> giver;    // by old rank: the new rank that gives its state (-1 when step < 0)
  std::vector<int> missing;  // step < 0: old ranks whose state no rank holds at the newest step
                             // every holder still has
};

// Pure, the same on every rank: `held[r]` is new rank r's own copies (any order),
// previous_rank[r] its rank in the old world of `old_size` ranks (-1 for a newcomer). An old rank
// that survived gives its own state; else the first rank holding a copy of it does.
[[nodiscard]] RecoveryPlan plan_recovery(const std::vector<std::vector<HeldCopy>>& held,
                                         const std::vector<int>& previous_rank, int old_size);

// The order of the copy ring over ranks 0..n-1, given each rank's failure domain: the domains
// in turn, in the order their first rank appears, each rank in rank order within its domain
// ({a, a, b, b} -> 0, 2, 1, 3). All ranks in one domain, or each in its own: 0, 1, ..., n-1.
[[nodiscard]] std::vector<int> copy_ring_order(std::span<const std::int64_t> domains);

class CopyRing {
 public:
  // `failure_domain`: what dies with this rank (ElasticWorld::failure_domain), empty for none.
  // replicated_state: the strategy declares TESSERA_REPLICATED_STATE (see above). share_on_host:
  // copies for ranks on this host stay in this rank's SnapshotArea, which they open, instead of
  // being sent (ElasticOptions::share_copies_on_host).
  explicit CopyRing(int copies, std::string failure_domain = {}, bool replicated_state = false,
                    bool share_on_host = true)
      : copies_per_rank_(copies),
        failure_domain_(std::move(failure_domain)),
        live_(replicated_state),
        share_on_host_(share_on_host) {}
  // Lets the copies still on their way land (or fail) before their buffers go.
  ~CopyRing();
  CopyRing(const CopyRing&) = delete;
  CopyRing& operator=(const CopyRing&) = delete;

  // Collective over `channel` (the world's ranks, ElasticWorld::side_channel), between steps:
  // saves `strategy`, waits for the copies the previous refresh sent and starts sending this
  // one's. A new channel (a new world) drops every copy of the old one first. Throws
  // TransportError/Timeout from the channel: a peer failed (the world's failure path follows).
  // With replicated_state: notes that the strategy's live state is of `position` (call it as soon
  // as a step completed, before anything else can throw); `channel` may then be the world itself,
  // nothing is saved or sent.
  void refresh(Strategy& strategy, const std::shared_ptr<Communicator>& channel,
               const TrainingPosition& position);
  // Whether the copies are the strategy's live state (no side channel, no saves).
  [[nodiscard]] bool replicated_state() const noexcept { return live_; }
  // This rank's rank in the world whose state the copies are of; -1 before the first refresh.
  [[nodiscard]] int rank_of_copies() const noexcept { return own_.empty() ? -1 : rank_; }

  // Collective over `world`, the next world; previous_rank[r] is new rank r's rank in the world
  // of the refreshes, -1 for a newcomer (which holds nothing). Every rank returns the same
  // position and set of missing ranks. Throws TransportError/Timeout from the communicator,
  // TrainingError when no survivor has refreshed at all. `strategy`, still set up on the old
  // world, is saved here (locally) when its live state is what this rank gives.
  [[nodiscard]] RecoveredState recover(Communicator& world, const std::vector<int>& previous_rank,
                                       Strategy& strategy);

  // Drops every copy: after a recovery, the copies of the old world are of no further use.
  void clear() noexcept;

  // The parts of recover() a rank does alone, for survivors that plan the recovery without a
  // communicator (they agree through the job's store: no world of theirs could be formed).
  // prepare_recovery lands the copies in flight and reads those held in other ranks' areas on
  // this host; then old_world_size is the size of the world of the refreshes (-1 before the
  // first), holdings what this rank holds of it (its entries of plan_recovery's `held`),
  // position_at where the run was at one of its own copies' steps, and state_of hands `use`
  // the saved state of old rank `old` at the plan's step, which plan.giver says this rank gives.
  void prepare_recovery();
  [[nodiscard]] int old_world_size() const noexcept {
    return own_.empty() ? -1 : own_.front().world_size;
  }
  [[nodiscard]] std::vector<HeldCopy> holdings(int old_size) const;
  [[nodiscard]] std::optional<TrainingPosition> position_at(std::int64_t step) const;
  void state_of(int old, const RecoveryPlan& plan, Strategy& strategy,
                const std::function<void(std::span<const std::uint8_t>)>& use) const;

 private:
  struct Snapshot {
    TrainingPosition position;
    int world_size = 0;
    bool whole = false;               // holds every rank's state, not this rank's alone
    bool live = false;                // the strategy's live state: bytes are saved on demand
    std::vector<std::uint8_t> bytes;  // the rank's save(), packed (PackedCheckpointWriter)
    std::optional<std::size_t> slot;  // an own copy in area_'s slot, instead of bytes
  };
  using Newest = std::vector<Snapshot>;  // newest first
  // The copies of one refresh on their way: incoming[d - 1] from the rank d places back. While
  // `poster` runs, it alone touches the exchange and issues on the channel; land_exchange joins it.
  struct CopiesInFlight {
    std::int64_t my_length = 0;
    std::vector<std::int64_t> lengths;  // every rank's, by the all-gather lengths_work
    std::shared_ptr<Work> lengths_work;
    std::vector<std::shared_ptr<Work>> works;
    std::vector<Snapshot> incoming;
    std::exception_ptr posting_failed;  // the gather failed, or a send or receive at issue
    std::thread poster;
  };

  void keep(Newest& held, Snapshot snapshot, std::size_t count);
  // A buffer of a dropped copy, or else an empty one with room for `bytes`.
  [[nodiscard]] std::vector<std::uint8_t> spare_buffer(std::size_t bytes);
  [[nodiscard]] static const Snapshot* at_step(const Newest& held, std::int64_t step);
  // Where this rank's copies go and whence the others' come, d = 1 .. copies ring steps away.
  struct Peers {
    std::vector<int> to;
    std::vector<int> from;
    // Edges that need no bytes sent: to[k] opened this rank's area, this rank from[k]'s.
    std::vector<bool> to_mapped;
    std::vector<bool> from_mapped;
    bool send_first = true;  // alternates around the ring: no cycle of ranks all in a send
  };
  // An own copy's bytes, wherever they are kept.
  [[nodiscard]] std::span<const std::uint8_t> bytes_of(const Snapshot& snapshot) const;
  // The first refresh of a world: whether every rank holds the whole state, where the copies
  // go, and which of them are kept in shared memory (SnapshotArea) rather than sent.
  void arrange(Communicator& channel, std::span<const std::uint8_t> first_pack);
  // recover(), in its three parts: the old world's size every holder agrees on, what every rank
  // holds (gathered), and the exchange of the state by plan_recovery's givers (position: the
  // plan step's, from the first holder).
  [[nodiscard]] int agree_on_old_world_size(Communicator& world, bool holds) const;
  [[nodiscard]] std::vector<std::vector<HeldCopy>> gather_holdings(Communicator& world, bool holds,
                                                                   int old_size) const;
  [[nodiscard]] std::shared_ptr<MemoryCheckpoint> exchange_state(Communicator& world,
                                                                 const RecoveryPlan& plan,
                                                                 bool holds, int old_size,
                                                                 Strategy& strategy,
                                                                 TrainingPosition& position) const;
  // Saves `strategy` into the next slot of area_ and returns the snapshot.
  [[nodiscard]] Snapshot save_into_area(Strategy& strategy, const TrainingPosition& position,
                                        int world_size);
  // The copies held through opened areas, into copies_ (at a recovery).
  void read_mapped_copies();
  // The poster thread: waits for the lengths, then issues the sends and receives of `exchange`.
  static void post_copies(CopiesInFlight& exchange, std::shared_ptr<Communicator> channel,
                          const Peers& peers, std::span<const std::uint8_t> out) noexcept;
  // Waits for the exchange in flight, if any, and keeps its copies when every part arrived.
  // rethrow: a part that failed throws (after every part was waited for); else it is dropped.
  void land_exchange(bool rethrow);
  // Aborts the channel and lands what is in flight, dropping it: nothing may still write
  // into a buffer once it is recycled or freed.
  void settle() noexcept;

  int copies_per_rank_;
  std::string failure_domain_;
  bool live_;
  bool share_on_host_;
  int rank_ = -1;  // this rank in the world of the refreshes
  Peers peers_;    // decided with whole_
  std::shared_ptr<Communicator> channel_;
  std::optional<bool> whole_;  // decided at the channel's first refresh
  Newest own_;
  std::map<int, Newest> copies_;  // by the rank they are of
  std::optional<CopiesInFlight> in_flight_;
  std::vector<std::vector<std::uint8_t>> spare_;  // buffers of dropped copies, for reuse
  // This rank's own copies in shared memory (null where /dev/shm refused: then in own_'s
  // bytes), the areas of the ranks whose copies it keeps on this host, by their rank, and
  // whether any edge of the world still sends its copies.
  std::unique_ptr<SnapshotArea> area_;
  std::size_t next_slot_ = 0;
  std::vector<std::uint8_t> overflow_;  // a pack that outgrew its slot, on its way to a larger one
  std::map<int, SnapshotHandle> mapped_;
  bool any_sent_ = false;
};

}  // namespace tessera::elastic
