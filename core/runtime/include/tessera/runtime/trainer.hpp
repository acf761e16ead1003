#pragma once
// Trainer: the training loop `tessera train` and embedding hosts share — data sharding over the
// strategy's data-parallel replicas, epochs, evaluation, metrics, progress, checkpoints — around
// one Strategy, with one seam (WorldSource) through which the world may change between steps.

#include <cstdint>
#include <filesystem>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "tessera/plugin/strategy.hpp"
#include "tessera/runtime/schedule.hpp"
#include "tessera/runtime/train_result.hpp"
#include "tessera/runtime/trainer_components.hpp"
#include "tessera/runtime/trainer_options.hpp"
#include "tessera/runtime/world_source.hpp"

namespace tessera {

namespace trace {
class Recorder;
}  // namespace trace
class EpochShard;
class FileCheckpointReader;

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

  // Lets the world change between steps of run() (runtime/world_source.hpp): planned changes
  // (planned_world_changes) or an elastic run (tessera/elastic/elastic_run.hpp). On a change
  // the strategy is reconfigured on the new world from the state the source names, the run goes
  // on from the position of that state, and the rest of the epoch is dealt over the new
  // data-parallel size by samples trained, so every sample of the epoch is still seen once;
  // checkpoints go on being written by the new world. The learning-rate schedule keeps the
  // length it had at the start (a newcomer learns it from rank 0). A rank handed no world
  // returns from run() with left_world set. Call before run(); null: the world never changes.
  void set_world_source(std::shared_ptr<WorldSource> source);
  // set_world_source(planned_world_changes(plan)).
  void set_world_plan(ChangePlan plan);

  ~Trainer();
  Trainer(Trainer&&) noexcept;

 private:
  class Control;  // the RunControl the world source is given
  struct Run;     // the state of one run(): position, planned length, progress, result
  enum class AfterStep : std::uint8_t { go_on, world_changed, left };

  TrainResult train(bool resume);  // run() without the trace around it
  // Writes the rank's trace with `status` ("complete", "failed") and the error, if any.
  void write_trace(const std::string& status, const std::string& error) const;
  // Where the run starts: a fresh start, a checkpoint (resume) or the world the source hands a
  // newcomer.
  void start(Run& run, bool resume);
  // The epochs from run.at to the end (or until this rank leaves the world).
  AfterStep train_epochs(Run& run);
  // One step of `shard` (its batch b), and what follows it: copies, metrics, checkpoint,
  // evaluation, a change of world.
  AfterStep step(Run& run, const EpochShard& shard, std::size_t b, std::size_t batches_before);
  // The final evaluation and checkpoint, summaries, the world source told.
  // Whether a run resumed at its checkpoint's step owes the evaluation due there (collective).
  [[nodiscard]] bool owes_resumed_evaluation(const Run& run) const;
  void finish(Run& run);
  // Moves the run onto `change` (see set_world_source).
  AfterStep apply(Run& run, WorldChange change);
  // Inside the handler of `failure`: the world the source hands, applied; a failure while it is
  // applied goes back to the source in turn.
  AfterStep go_on_after(Run& run, const Error& failure);
  void reconfigure(std::shared_ptr<Communicator> world, const CheckpointReader& state);
  void save_checkpoint(const TrainingPosition& next, TrainResult& result);
  [[nodiscard]] std::map<std::string, std::string> checkpoint_metadata(
      const TrainingPosition& next) const;
  void evaluate_into(Run& run, std::int64_t epoch);
  // The run's planned length: the rest of this epoch at the current data-parallel size, then
  // whole epochs (max_steps caps it). Recomputed when the world changes.
  [[nodiscard]] std::int64_t planned_total_steps(const TrainingPosition& at) const;
  // A step whose loss or norm is not finite: throws TrainingError unless it was skipped.
  void check_nonfinite_step(const StepStats& stats, const StepInfo& info) const;
  [[nodiscard]] std::vector<RankSummary> gather_rank_summaries();
  // The strategy's data-parallel placement, checked (collective): in range on every rank and
  // one reporting rank per replica. Throws InvalidArgument naming the strategy otherwise.
  [[nodiscard]] DataParallelPlacement checked_placement();
  // Where a checkpoint says the run is; throws CheckpointError for one that does not fit.
  [[nodiscard]] TrainingPosition checkpoint_position(const FileCheckpointReader& reader) const;

  TrainerOptions options_;
  TrainerComponents parts_;
  std::vector<std::filesystem::path> written_checkpoints_;  // by this run, oldest first
  DataParallelPlacement placement_;
  std::shared_ptr<WorldSource> source_;  // never null: a default one changes nothing
  std::unique_ptr<Control> control_;
  LrSchedule schedule_;                        // the run's, its length fixed at the start
  std::shared_ptr<trace::Recorder> recorder_;  // null unless tracing
  std::filesystem::path trace_path_;
};

}  // namespace tessera
