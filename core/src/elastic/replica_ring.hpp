#pragma once
// Copies of each rank's strategy state kept in the memory of other ranks, so that the
// survivors of a failure rebuild the whole state without reading a checkpoint (the Gemini idea).
//
// refresh() saves the strategy into memory (Strategy::save, as a checkpoint would) and sends
// the bytes to the next `replicas` ranks of the ring (rank r to r+1 .. r+replicas, modulo the
// world size), which keep them. Each rank keeps its two newest refreshes, its own and those
// it holds: a failure may strike while some ranks finished a refresh and others did not, and
// then the one before it is on every rank.
//
// recover() runs on the next world: its ranks agree on the newest step every survivor holds,
// pick for each rank of the old world one survivor that holds its state at that step (its own
// rank if it survived, else the first holder of a copy) and gather the whole state.
#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <vector>

#include "tessera/plugin/communicator.hpp"
#include "tessera/plugin/strategy.hpp"
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

class ReplicaRing {
 public:
  explicit ReplicaRing(int replicas) : replicas_(replicas) {}

  // Collective over `world`, between steps: saves `strategy` and exchanges the copies.
  void refresh(Strategy& strategy, Communicator& world, const TrainingPosition& position);

  // Collective over `world`, the next world; previous_rank[r] is new rank r's rank in the world
  // of the refreshes, -1 for a newcomer (which holds nothing). Every rank returns the same
  // position and set of missing ranks. Throws TransportError/Timeout from the communicator,
  // TrainingError when no survivor has refreshed at all.
  [[nodiscard]] RecoveredState recover(Communicator& world, const std::vector<int>& previous_rank);

  // Drops every copy: after a recovery, the copies of the old world are of no further use.
  void clear() noexcept;

 private:
  struct Snapshot {
    TrainingPosition position;
    int world_size = 0;
    std::vector<std::uint8_t> bytes;  // pack_memory_checkpoint of the rank's save()
  };
  // Newest first: [0] the latest refresh, [1] the one before.
  using TwoNewest = std::vector<Snapshot>;
  static void keep(TwoNewest& held, Snapshot snapshot);
  [[nodiscard]] static const Snapshot* at_step(const TwoNewest& held, std::int64_t step);

  int replicas_;
  int rank_ = -1;  // this rank in the world of the refreshes
  TwoNewest own_;
  std::map<int, TwoNewest> copies_;  // by the rank they are of
};

}  // namespace tessera::elastic
