#pragma once
// Trainer: the training loop `tessera train` and embedding hosts share — data sharding over the
// strategy's data-parallel replicas, epochs, evaluation, metrics, progress, checkpoints and
// world changes between steps — around one Strategy.

#include <chrono>
#include <cstdint>
#include <filesystem>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "tessera/base/device_allocator.hpp"
#include "tessera/base/error.hpp"
#include "tessera/plugin/communicator.hpp"
#include "tessera/plugin/dataset.hpp"
#include "tessera/plugin/model.hpp"
#include "tessera/plugin/optimizer.hpp"
#include "tessera/plugin/strategy.hpp"
#include "tessera/runtime/config.hpp"
#include "tessera/runtime/elastic.hpp"
#include "tessera/runtime/schedule.hpp"

namespace tessera {

namespace trace {
class Recorder;
}  // namespace trace
namespace elastic {
class ReplicaRing;
}  // namespace elastic
class FileCheckpointReader;

// Training went wrong: a step's loss or gradient norm is not finite, or its metrics cannot be
// written. The message names the step or the file. (Declared with the trainer, which alone
// throws it; docs/errors.md lists it with the others.)
class TESSERA_ERROR_API TrainingError : public Error {
 public:
  using Error::Error;
  ~TrainingError() override;
};

enum class ProgressMode : std::uint8_t { automatic, bar, lines, off };

// Tracing of a run (docs/tracing.md): [train] trace_file, trace_steps, trace_max_events.
struct TraceOptions {
  // Each rank writes trace_file_for_rank(file, rank) (runtime/trace_files.hpp); empty: off.
  std::filesystem::path file;
  // Steps [first_step, last_step] are recorded, with the run's setup, resume and its final
  // evaluation and checkpoint; kNoLastStep: to the end.
  static constexpr std::int64_t kNoLastStep = INT64_MAX;
  std::int64_t first_step = 1;
  std::int64_t last_step = 100;
  std::size_t max_events = 1'000'000;  // per rank; later events are dropped and counted

  [[nodiscard]] bool covers(std::int64_t step) const noexcept {
    return step >= first_step && step <= last_step;
  }
  // Parses trace_steps: "FIRST:LAST" or "FIRST:" (to the end), 1 <= FIRST <= LAST. Throws
  // ConfigError naming [train] trace_steps (--trace-steps).
  void set_steps(const std::string& text);
};

// The [train] section (docs/training.md lists every option).
struct TrainerOptions {
  std::int64_t epochs = 1;
  std::int64_t max_steps = 0;   // 0: no limit besides epochs
  std::size_t batch_size = 64;  // per rank
  std::size_t micro_batches = 1;
  std::size_t eval_batch_size = 1000;
  LrSchedule schedule;  // total_steps 0 with cosine: the whole run
  double max_grad_norm = 0.0;
  std::uint64_t seed = 0;
  std::int64_t eval_every = 0;           // steps; 0: after each epoch
  std::filesystem::path checkpoint_dir;  // empty: no checkpoints
  std::int64_t checkpoint_every = 0;
  std::size_t checkpoint_keep = 2;
  std::filesystem::path metrics_file;
  ProgressMode progress = ProgressMode::automatic;
  TraceOptions trace;
  // on_nonfinite = skip: a step with a non-finite loss or gradient norm makes no update and is
  // counted; false (error): it stops the run with a TrainingError.
  bool skip_nonfinite_steps = false;

  // Reads the [train] section. Throws ConfigError for out-of-range values.
  [[nodiscard]] static TrainerOptions from(const Options& train);
};

// What one rank trains with. A host may build these itself (its own model, dataset or
// communicator) or let build_trainer_components() make them from a Config.
struct TrainerComponents {
  std::shared_ptr<Communicator> world;
  std::shared_ptr<const Model> model;
  std::shared_ptr<const Optimizer> optimizer;
  std::shared_ptr<const Dataset> dataset;
  std::shared_ptr<Strategy> strategy;
  std::string strategy_name;  // recorded in checkpoints
  // Strategy names a checkpoint may have been written by (build_trainer_components: every
  // loaded strategy plugin); --resume refuses a checkpoint naming another. Empty: not checked.
  std::vector<std::string> known_strategies = {};
  // Where the strategy keeps its state and the model computes (StrategySetup::allocator):
  // null for the host; for [runtime] device = cuda, the allocator of the GPU `world` moves.
  std::shared_ptr<DeviceAllocator> memory = nullptr;
  // The strategy declares TESSERA_REPLICATED_STATE (PluginCapabilities::replicated_state): an
  // elastic run then keeps no copies of its state, since every survivor's is whole and the
  // last completed step's. false (the safe default for a host that builds its own parts):
  // copies are kept.
  bool strategy_replicated_state = false;
};

// Creates the [train] section's model, optimizer, dataset and strategy through `registry`.
[[nodiscard]] TrainerComponents build_trainer_components(const Config& config,
                                                         const PluginRegistry& registry,
                                                         std::shared_ptr<Communicator> world);

struct RankSummary {
  int rank = 0;
  std::uint64_t peak_rss_bytes = 0;  // VmHWM of the rank's process
  MemoryReport memory;
};

// One change of an elastic run's world (Trainer::set_elastic), as every rank of the new world
// saw it.
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

struct TrainResult {
  std::int64_t steps = 0;  // optimizer steps in total, including before a resume
  std::int64_t steps_this_run = 0;
  std::int64_t resumed_from_step = -1;  // -1: started fresh
  double test_accuracy = 0.0;
  double test_loss = 0.0;
  double samples_per_s = 0.0;  // global training samples per second of this run
  double seconds = 0.0;
  std::int64_t skipped_steps = 0;  // steps of this run with no update (on_nonfinite = skip)
  std::vector<double> losses;      // this run's per-step loss, in order
  std::vector<RankSummary> ranks;  // every rank's, on every rank
  std::optional<std::filesystem::path> last_checkpoint;
  std::vector<WorldEvent> world_events;  // elastic runs: each world change, in order
  int rank = 0;                          // this rank in the world that finished the run
  // The world provider dropped this rank after step `steps`: run() returned right after the
  // state exchange, without the final evaluation, checkpoint or `ranks`, which the ranks that
  // go on produce.
  bool left_world = false;
};

// A change of world between steps (Trainer::set_world_provider).
struct WorldChange {
  // The world this rank continues in, connected by the host; null: this rank leaves the run.
  std::shared_ptr<Communicator> world;
};

// Consulted by Trainer::run() on every rank of the current world at each step boundary, after
// the step's checkpoint and evaluation, with the number of steps done. Returns no value to go
// on in the same world. Whether it returns a change must be the same on every rank of the
// current world (each rank's new world differs, of course).
using WorldProvider = std::function<std::optional<WorldChange>(std::int64_t steps_done)>;

// Collective: every rank constructs a Trainer with the same options and calls run().
// Not thread-safe; one Trainer per rank.
class Trainer {
 public:
  // Throws ConfigError for a dataset that does not fit the model, and for an options.trace.file
  // this rank's trace cannot be created next to (naming --trace and the path).
  Trainer(TrainerOptions options, TrainerComponents components);

  // Sets up the strategy, resumes from the newest checkpoint in checkpoint_dir when `resume`
  // is true (a fresh start if the folder holds none), trains, evaluates and writes the final
  // checkpoint; of the checkpoints it writes it keeps the newest checkpoint_keep, and it
  // never removes one it did not write. Throws CheckpointError, before training anything,
  // for a newest checkpoint that cannot be resumed from (corrupted, truncated, inconsistent,
  // another model, seed or data set), and without `resume` for a checkpoint_dir that already
  // holds checkpoints (docs/training.md, "Resuming"); TrainingError for a step whose loss or
  // gradient norm is not finite (unless skipped) or for metrics that cannot be written.
  // With options.trace.file set, the rank's trace is written when run() returns or throws
  // (marked failed, with the error); a trace that cannot be written at the end is a
  // TrainingError.
  TrainResult run(bool resume);

  // Accuracy and mean loss over the whole test split; each replica evaluates its share and
  // only reporting ranks (Strategy::data_parallel_placement) are counted. Collective; after
  // run() has set the strategy up.
  [[nodiscard]] std::pair<double, double> evaluate();

  // Lets the world change between steps of run(). On a change every rank of the old world
  // saves the strategy into memory and the ranks exchange it (gather_state_in_memory, a
  // planned change: every old rank must still be there); ranks given a new world then call
  // Strategy::reconfigure() on it together and deal the rest of the epoch over the new
  // data-parallel size by samples trained, so every sample of the epoch is still seen once;
  // a rank given none returns from run() with left_world set. Checkpoints go on being written
  // by the new world. The learning-rate schedule keeps the length it was given at the start.
  // A rank that joins the run is not supported here (issue 15). Call before run().
  void set_world_provider(WorldProvider provider) { world_provider_ = std::move(provider); }
  // Makes the run elastic (docs/training.md, "Elastic training"): `entered` is the world this
  // worker entered the job with (ElasticWorld::enter), and the trainer was given its world.
  // Every replica_every steps each rank saves the strategy into memory and copies it to the
  // next `replicas` ranks; when a collective fails (a rank died, stalled or left:
  // TransportError, Timeout), every survivor regroups into the next generation, rebuilds the
  // whole state from what the survivors hold (or, when a rank's state and all its copies are
  // gone, from the newest checkpoint, saying so), reconfigures the strategy for the new world
  // and goes on from the step the state is of, dealing the rest of the epoch over the new
  // world. Newcomers are admitted at step boundaries inside an epoch: they receive the state
  // from the members. A worker that enters a running job (entered.joins_running_job()) sets
  // its strategy up on a world of its own, then receives the state; --resume does not apply
  // to it. Each change is in TrainResult::world_events and, from rank 0, on standard error.
  // When fewer than min_workers are left after join_timeout, the survivors write their state,
  // rebuilt as for a regroup, as a checkpoint into checkpoint_dir and run() throws
  // TrainingError naming it and how to resume (docs/training.md, "Elastic training").
  // Call before run().
  void set_elastic(std::shared_ptr<ElasticWorld> elastic, const Regrouping& entered);
  ~Trainer();
  Trainer(Trainer&&) noexcept;

 private:
  struct Position;

  TrainResult train(bool resume);  // run() without the trace around it
  // Writes the rank's trace with `status` ("complete", "failed") and the error, if any.
  void write_trace(const std::string& status, const std::string& error) const;
  Position restore(TrainResult& result);
  void save_checkpoint(const Position& next, TrainResult& result);
  // A step whose loss or norm is not finite: throws TrainingError unless it was skipped.
  void check_nonfinite_step(const StepStats& stats, const StepInfo& info) const;
  [[nodiscard]] std::vector<RankSummary> gather_rank_summaries();
  // The strategy's data-parallel placement, checked (collective): in range on every rank and
  // one reporting rank per replica. Throws InvalidArgument naming the strategy otherwise.
  [[nodiscard]] DataParallelPlacement checked_placement();
  // Asks the world provider; on a change, exchanges the state and reconfigures the strategy.
  enum class WorldStep : std::uint8_t { same, changed, left };
  WorldStep consult_world_provider(std::int64_t steps_done);
  // Where a checkpoint says the run is; throws CheckpointError for one that does not fit.
  Position checkpoint_position(const FileCheckpointReader& reader) const;
  // Elastic: refreshes the copies of the state when `at` is on the replica_every grid (or
  // always, with force); for a strategy with replicated state, notes the step its live state is
  // of, every time (nothing is copied).
  void refresh_replicas(const Position& at, bool force);
  // Elastic: the world failed while the run was at `failed_at`; returns where it goes on.
  Position recover_from_failure(const std::string& reason, const Position& failed_at,
                                TrainResult& result);
  // Elastic: newcomers wait; every member is at `at` (the next sample). Returns where the new
  // world goes on (`at` itself).
  Position admit_newcomers(const Position& at, TrainResult& result);
  // Elastic: moves the run onto `regroup`'s world, the members and newcomers of it together:
  // gathers the state of the world before (from memory, or the newest checkpoint), reconfigures
  // the strategy, refreshes the copies and agrees on the schedule's length. Records the world
  // event (failed_at_step -1: an admission; seconds since `started`) and, on rank 0, prints its
  // line. Returns where the run goes on. TrainingError when the run ended meanwhile.
  Position adopt_world(Regrouping regroup, std::int64_t failed_at_step,
                       std::chrono::steady_clock::time_point started, TrainResult& result);
  // Elastic: fewer than min_workers were left at join_timeout (`regroup` is stopping). The
  // survivors rebuild the state from memory and write it into checkpoint_dir (unless the newest
  // checkpoint there is as new), then each throws TrainingError saying where it is and how to
  // resume, or why none could be written and which checkpoint remains.
  [[noreturn]] void stop_below_min_workers(const Regrouping& regroup, std::int64_t failed_at_step,
                                           TrainResult& result);

  TrainerOptions options_;
  TrainerComponents parts_;
  std::vector<std::filesystem::path> written_checkpoints_;  // by this run, oldest first
  DataParallelPlacement placement_;
  WorldProvider world_provider_;
  std::shared_ptr<ElasticWorld> elastic_;
  std::unique_ptr<elastic::ReplicaRing> replicas_;
  std::optional<Regrouping> joining_;  // elastic: the running job's world this worker entered
  LrSchedule schedule_;                // the run's, its length fixed at the start
  std::shared_ptr<trace::Recorder> recorder_;  // null unless tracing
  std::filesystem::path trace_path_;
};

// Writes `result` as the --summary JSON (docs/training.md).
void write_summary_json(const std::filesystem::path& file, const TrainResult& result);

// Peak resident set size of this process (VmHWM from /proc/self/status), 0 if unknown.
[[nodiscard]] std::uint64_t peak_rss_bytes();

}  // namespace tessera
