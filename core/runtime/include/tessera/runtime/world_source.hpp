#pragma once
// The trainer's one seam for a world that changes between steps. A WorldSource is consulted at
// fixed points of Trainer::run() and may hand the run a new world together with where its state
// comes from: the old world's memory (a planned resize), the survivors' copies (a failure), a
// checkpoint, or what a newcomer received from the members. Planned changes
// (planned_world_changes) and elastic training (tessera/elastic) are two sources on this seam;
// the trainer knows neither.
#include <cstdint>
#include <filesystem>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "tessera/base/device_allocator.hpp"
#include "tessera/base/error.hpp"
#include "tessera/plugin/checkpoint_io.hpp"
#include "tessera/plugin/communicator.hpp"
#include "tessera/plugin/strategy.hpp"

namespace tessera {

class FileCheckpointReader;

// Where a run is: `step` optimizer steps done, and the next sample to train is `samples` into
// epoch `epoch`'s order (0-based). A checkpoint records it, and so does a copy of the state, so
// that a run going on from either sees exactly the rest of the epoch at any world size.
struct TrainingPosition {
  std::int64_t step = 0;
  std::int64_t epoch = 0;
  std::size_t samples = 0;

  friend bool operator==(const TrainingPosition&, const TrainingPosition&) = default;
};

// One change of a run's world, as every rank of the new world saw it (TrainResult::world_events).
struct WorldEvent {
  std::int64_t generation = 0;
  std::vector<std::string> left;    // worker ids
  std::vector<std::string> joined;  // worker ids
  int world_size = 0;               // of the new world
  // Steps done when the old world failed; -1 when it did not fail but admitted newcomers.
  std::int64_t failed_at_step = 0;
  std::int64_t resumed_at_step = 0;  // the step the new world went on from
  // "memory" (the survivors' state and the copies they held) or the checkpoint folder read.
  std::string state_from;
  double seconds = 0.0;  // from the failure (or admission) to the new world being ready to train
};

// A new world for this rank and the state the run goes on from in it.
struct WorldChange {
  // The communicator this rank continues in; null: this rank leaves the run (run() returns
  // with TrainResult::left_world set).
  std::shared_ptr<Communicator> world;
  // What the strategy is reconfigured from (Strategy::reconfigure); required with `world`.
  std::shared_ptr<const CheckpointReader> state;
  // The position `state` is of; empty: where the run was (a change at a step boundary that
  // loses and repeats nothing). A position behind the run's drops the losses of the steps
  // after it from TrainResult::losses: they are trained again.
  std::optional<TrainingPosition> position;
  // Recorded in TrainResult::world_events (its resumed_at_step filled in by the trainer);
  // none for a change that is no event of the run's history.
  std::optional<WorldEvent> event;
};

// What a WorldSource may do with the run it serves; the Trainer implements it. Every method is
// called on the trainer's thread, from inside one of the WorldSource hooks.
class RunControl {
 public:
  virtual ~RunControl();
  [[nodiscard]] virtual Strategy& strategy() = 0;
  // The run's current world (traced when the run is).
  [[nodiscard]] virtual const std::shared_ptr<Communicator>& world() const = 0;
  // Where the strategy keeps its state (StrategySetup::allocator); null for the host.
  [[nodiscard]] virtual DeviceAllocator* memory() const = 0;
  // [train] checkpoint_dir; empty when the run writes no checkpoints.
  [[nodiscard]] virtual const std::filesystem::path& checkpoint_dir() const = 0;
  // Where `reader`'s checkpoint says the run is. Throws CheckpointError for one that does not
  // fit this run (another seed, data set or strategy family, a position out of range).
  [[nodiscard]] virtual TrainingPosition checkpoint_position(
      const FileCheckpointReader& reader) const = 0;
  // Moves the strategy and the run onto `world` with `state` now (collective over `world`), as
  // applying a WorldChange would, for a source that must act in the new world before it
  // returns (the survivors of a stopping job that save their state together).
  virtual void reconfigure(std::shared_ptr<Communicator> world, const CheckpointReader& state) = 0;
  // Writes the strategy's state as a checkpoint recorded at `at` (collective over world()) and
  // returns its folder. Needs checkpoint_dir.
  virtual std::filesystem::path save_checkpoint(const TrainingPosition& at) = 0;
  // What a checkpoint of the run at `at` records beside the strategy's state (its manifest's
  // metadata: the position, the seed, the strategy), for a source that writes one without
  // world() (CheckpointParts). Not collective.
  [[nodiscard]] virtual std::map<std::string, std::string> checkpoint_metadata(
      const TrainingPosition& at) const = 0;
};

// Consulted by Trainer::run() (Trainer::set_world_source). The defaults change nothing. Unless
// said otherwise every hook is collective over the current world: every rank must return the
// same kind of answer (a change or none) at the same point.
class WorldSource {
 public:
  virtual ~WorldSource();

  // The world the strategy is set up on: `given` (the run's), or one of this rank's own for a
  // worker that receives a running job's state in start(). Not collective.
  [[nodiscard]] virtual std::shared_ptr<Communicator> setup_world(
      std::shared_ptr<Communicator> given);
  // Whether this rank enters a run already under way: it has no start in common with the
  // others (no barrier), does not resume from a checkpoint and must be handed its world by
  // start(). Not collective.
  [[nodiscard]] virtual bool joins_running_run() const;
  // Once the strategy is set up and, unless joins_running_run(), the run's start is known (`at`:
  // a fresh start or where --resume put it): a world to start in (required when
  // joins_running_run()), or none. Collective over the world the rank trains in.
  [[nodiscard]] virtual std::optional<WorldChange> start(RunControl& run,
                                                         const TrainingPosition& at);
  // Right after a step completed, before anything of it can fail (its checkpoint, evaluation):
  // `next` is the position after it. Not a place to change the world.
  virtual void step_completed(RunControl& run, const TrainingPosition& next);
  // At a step boundary, after the step's checkpoint and evaluation; `inside_epoch`: samples of
  // the epoch are left (a new world deals them over its replicas). A change, or none.
  [[nodiscard]] virtual std::optional<WorldChange> at_boundary(RunControl& run,
                                                               const TrainingPosition& next,
                                                               bool inside_epoch);
  // A step, or its checkpoint or evaluation, threw `failure` while the run was at `at` (the
  // position after the last step that completed on this rank); or moving onto the world a
  // change handed did (a member of it failed during the reconfiguration or adopted()). Called
  // inside the handler: returns the world to go on in, or rethrows (`throw;`), which the
  // default does.
  [[nodiscard]] virtual WorldChange failed(RunControl& run, const Error& failure,
                                           const TrainingPosition& at);
  // The run moved onto a new world, whose position is `at`, and the strategy was reconfigured
  // on it: e.g. the first copies of its state are made. `event`: the change's record (null
  // when it has none), its resumed_at_step set, for the source to complete and report.
  virtual void adopted(RunControl& run, const TrainingPosition& at, WorldEvent* event);
  // The run ended on this rank, after its final evaluation and checkpoint.
  virtual void finished(RunControl& run);
};

// A change of world between steps, planned by the host (planned_world_changes).
struct PlannedChange {
  // The world this rank continues in, connected by the host; null: this rank leaves the run.
  std::shared_ptr<Communicator> world;
};

// Consulted on every rank of the current world at each step boundary, after the step's
// checkpoint and evaluation, with the number of steps done. Returns no value to go on in the
// same world. Whether it returns a change must be the same on every rank of the current world.
using ChangePlan = std::function<std::optional<PlannedChange>(std::int64_t steps_done)>;

// A WorldSource for planned changes: on a change every rank of the old world saves the strategy
// into memory and the ranks exchange it (gather_state_in_memory: every old rank must still be
// there), and the ranks given a new world go on in it from that state at the same position; a
// rank given none leaves the run.
[[nodiscard]] std::shared_ptr<WorldSource> planned_world_changes(ChangePlan plan);

}  // namespace tessera
