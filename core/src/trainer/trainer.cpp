#include "tessera/runtime/trainer.hpp"

#include <algorithm>
#include <charconv>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <ctime>
#include <limits>
#include <nlohmann/json.hpp>
#include <sstream>
#include <utility>

#include "elastic/replica_ring.hpp"
#include "tessera/base/error.hpp"
#include "tessera/runtime/checkpoint.hpp"
#include "tessera/runtime/data_order.hpp"
#include "tessera/runtime/trace_files.hpp"
#include "tessera/strategy_kit/host_values.hpp"
#include "tessera/strategy_kit/memory_state.hpp"
#include "tessera/strategy_kit/param_checkpoint.hpp"
#include "tessera/strategy_kit/trace.hpp"
#include "trace/traced_components.hpp"
#include "trainer/progress_reporter.hpp"

namespace tessera {

TrainingError::~TrainingError() = default;

// Where training goes on. A checkpoint records it, so a resumed run sees exactly the rest of
// the epoch, at whatever world size it resumes.
struct Trainer::Position {
  std::int64_t step = 0;    // optimizer steps done
  std::int64_t epoch = 0;   // 0-based
  std::size_t samples = 0;  // samples of this epoch's order trained on, over all ranks
};

namespace {

// Checkpoint metadata keys of the position (docs/training.md).
constexpr const char* kEpochKey = "epoch";
constexpr const char* kSamplesKey = "epoch_samples_done";
constexpr const char* kLegacyBatchKey = "batch";  // before epoch_samples_done: a batch index

std::string metadata_or_throw(const std::map<std::string, std::string>& meta,
                              const std::string& key, const std::filesystem::path& folder) {
  const auto it = meta.find(key);
  if (it == meta.end()) {
    throw CheckpointError("checkpoint " + folder.string() + " has no '" + key + "' metadata");
  }
  return it->second;
}

template <class T>
T metadata_number(const std::map<std::string, std::string>& meta, const std::string& key,
                  const std::filesystem::path& folder) {
  const auto text = metadata_or_throw(meta, key, folder);
  T value{};
  const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), value);
  if (ec != std::errc() || end != text.data() + text.size() || value < T{}) {
    throw CheckpointError("checkpoint " + folder.string() + ": metadata '" + key + "' is '" + text +
                          "', not a whole number >= 0");
  }
  return value;
}

// Without --resume a run starts at step 0 and would replace and prune what is there.
void refuse_to_overwrite(const std::filesystem::path& dir) {
  const auto existing = list_checkpoints(dir);
  if (existing.empty()) return;
  throw CheckpointError("checkpoint_dir " + dir.string() + " already holds " +
                        std::to_string(existing.size()) + " checkpoint(s), the newest " +
                        existing.back().filename().string() +
                        ": pass --resume to continue from it, set [train] checkpoint_dir "
                        "(--train.checkpoint_dir) to another folder, or remove this one to start "
                        "afresh; nothing was changed");
}

// Without --resume the records of a run would follow another run's in the same file, and
// nothing in them tells the two apart: refused as a checkpoint_dir in use is. Every rank looks,
// as at a checkpoint_dir, so that all of them stop where the file is seen.
void refuse_to_append(const std::filesystem::path& metrics_file) {
  std::error_code ec;
  const auto bytes = std::filesystem::file_size(metrics_file, ec);
  if (ec || bytes == 0) return;
  throw ConfigError("[train] metrics_file " + metrics_file.string() + " already holds " +
                    std::to_string(bytes) +
                    " bytes of records of an earlier run: pass --resume to continue that run "
                    "(its records are appended to), set [train] metrics_file "
                    "(--train.metrics_file) to another file, or remove this one to start "
                    "afresh; nothing was changed");
}

// The strategy a checkpoint names must exist and agree with its parameter index; which
// strategy loads it is free (every data-parallel strategy reads every other's checkpoints).
void check_strategy_name(const FileCheckpointReader& reader, const TrainerComponents& parts) {
  const auto where = "checkpoint " + reader.folder().string() + ": ";
  const auto name = metadata_or_throw(reader.manifest().metadata, "strategy", reader.folder());
  const auto& known = parts.known_strategies;
  // "unknown" is what a host that names no strategy records (TrainerComponents).
  if (name != "unknown" && name != parts.strategy_name && !known.empty() &&
      std::find(known.begin(), known.end(), name) == known.end()) {
    std::string list;
    for (const auto& k : known) list += (list.empty() ? "" : ", ") + k;
    throw CheckpointError(where + "was written by strategy '" + name +
                          "', which no loaded plugin provides (known: " + list + ")");
  }
  // The parameter index (a format-1 sharded manifest) names its writer too; ddp's of format 1
  // names none, and a strategy may keep its state in blobs of its own.
  const bool indexed = reader.contains("parameters") || reader.contains("sharded/manifest");
  const auto writer = indexed ? SliceReader(reader).index().strategy : std::string();
  if (name != "unknown" && !writer.empty() && writer != name) {
    throw CheckpointError(where + "its metadata names strategy '" + name +
                          "', its parameter index '" + writer +
                          "': the manifest was edited or belongs to another checkpoint");
  }
}

// Replica placement.rank's share: the ranks of one replica train on the same rows.
EpochShard train_shard(const TrainerOptions& o, const Dataset& data,
                       const DataParallelPlacement& placement, std::int64_t epoch,
                       std::size_t consumed) {
  EpochShardSpec spec{data.size(Split::train),
                      static_cast<std::uint64_t>(epoch),
                      o.seed,
                      placement.rank,
                      placement.size,
                      o.batch_size,
                      true};
  spec.consumed = consumed;
  return EpochShard(spec);
}

std::string format_number(double value) {
  std::ostringstream text;
  text << value;
  return text.str();
}

std::string listed(const std::vector<std::string>& ids) {
  std::string text;
  for (const auto& id : ids) text += (text.empty() ? "" : ", ") + id;
  return text;
}

// "the state of rank(s) 2, 3 of the 4-rank world and every copy of it (replicas = 1) were lost
// with the failed workers": why a recovery found no state in memory.
std::string lost_state(const elastic::RecoveredState& recovered, int replicas) {
  std::string lost;
  for (const int r : recovered.missing) lost += (lost.empty() ? "" : ", ") + std::to_string(r);
  return "the state of rank(s) " + lost + " of the " +
         std::to_string(recovered.previous_world_size) +
         "-rank world and every copy of it (replicas = " + std::to_string(replicas) +
         ") were lost with the failed workers";
}

// What --resume would go on from in `dir`, for a message that says nothing new was written.
std::string newest_checkpoint_note(const std::filesystem::path& dir) {
  try {
    const auto reader = open_newest_checkpoint(dir);
    if (!reader) return "there is no checkpoint in " + dir.string() + " to resume from either";
    return "the newest checkpoint on disk, " + reader->folder().string() + " (step " +
           std::to_string(reader->manifest().step) +
           "), is unchanged: `tessera train --resume` goes on from it";
  } catch (const CheckpointError& e) {
    return std::string("and the newest checkpoint on disk does not verify: ") + e.what();
  }
}

}  // namespace

void Trainer::check_nonfinite_step(const StepStats& stats, const StepInfo& info) const {
  const std::string figures = "loss " + format_number(stats.loss) + ", gradient norm " +
                              format_number(stats.grad_norm) + ", learning rate " +
                              format_number(info.learning_rate);
  if (!options_.skip_nonfinite_steps) {
    throw TrainingError("step " + std::to_string(info.step) + " is not finite (" + figures +
                        "): training stopped, no checkpoint written after it; lower [train] lr "
                        "or set [train] max_grad_norm, or skip such steps with [train] "
                        "on_nonfinite = skip");
  }
  if (!stats.skipped) {
    throw TrainingError("step " + std::to_string(info.step) + " is not finite (" + figures +
                        ") and strategy '" + parts_.strategy_name +
                        "' updated the parameters anyway: it does not support [train] "
                        "on_nonfinite = skip");
  }
}

Trainer::~Trainer() = default;
Trainer::Trainer(Trainer&&) noexcept = default;

Trainer::Trainer(TrainerOptions options, TrainerComponents components)
    : options_(std::move(options)), parts_(std::move(components)) {
  TESSERA_CHECK(
      parts_.world && parts_.model && parts_.optimizer && parts_.dataset && parts_.strategy,
      "Trainer needs a communicator, model, optimizer, dataset and strategy");
  if (parts_.dataset->sample_shape() != parts_.model->input_shape() ||
      parts_.dataset->num_classes() != parts_.model->num_classes()) {
    throw ConfigError("the dataset's samples (" +
                      std::to_string(element_count(parts_.dataset->sample_shape())) +
                      " elements, " + std::to_string(parts_.dataset->num_classes()) +
                      " classes) do not fit the model's input (" +
                      std::to_string(element_count(parts_.model->input_shape())) + " elements, " +
                      std::to_string(parts_.model->num_classes()) + " classes)");
  }
  if (!options_.trace.file.empty()) {
    // Checked now, so that an unwritable path fails before anything trains.
    const int rank = parts_.world->rank();
    check_trace_destination(options_.trace.file, rank);
    trace_path_ = trace_file_for_rank(options_.trace.file, rank);
    recorder_ = std::make_shared<trace::Recorder>(rank, options_.trace.max_events);
    // Every strategy's collectives and optimizer steps are recorded through these two.
    parts_.world = trace::traced_communicator(parts_.world, recorder_);
    parts_.optimizer = trace::traced_optimizer(parts_.optimizer, recorder_);
  }
}

Trainer::Position Trainer::restore(TrainResult& result) {
  if (options_.checkpoint_dir.empty()) {
    throw ConfigError("--resume needs [train] checkpoint_dir");
  }
  const auto reader = open_newest_checkpoint(options_.checkpoint_dir);
  if (!reader) return Position{};  // nothing written yet: a fresh start
  const Position start = checkpoint_position(*reader);
  const trace::Span span("checkpoint_load", "checkpoint", {{"step", start.step}});
  parts_.strategy->load(*reader);
  result.resumed_from_step = start.step;
  return start;
}

Trainer::Position Trainer::checkpoint_position(const FileCheckpointReader& reader) const {
  Position start;
  const auto& folder = reader.folder();
  const auto& manifest = reader.manifest();
  const auto& meta = manifest.metadata;
  const auto where = "checkpoint " + folder.string() + ": ";
  // Every field is checked before the strategy loads anything.
  const auto seed = metadata_or_throw(meta, "seed", folder);
  if (seed != std::to_string(options_.seed)) {
    throw CheckpointError(where + "was written with seed " + seed + ", this run has seed " +
                          std::to_string(options_.seed) + ": the data order would differ");
  }
  check_strategy_name(reader, parts_);
  start.step = manifest.step;
  start.epoch = metadata_number<std::int64_t>(meta, kEpochKey, folder);
  if (start.epoch > start.step) {
    throw CheckpointError(where + "says epoch " + std::to_string(start.epoch + 1) + " after only " +
                          std::to_string(start.step) + " steps: every epoch takes a step at least");
  }
  const std::size_t n = parts_.dataset->size(Split::train);
  if (meta.count(kSamplesKey) != 0) {
    start.samples = metadata_number<std::size_t>(meta, kSamplesKey, folder);
  } else {
    // Written before positions were kept in samples: batch index at the writer's world size.
    const auto batch = metadata_number<std::size_t>(meta, kLegacyBatchKey, folder);
    const auto batch_size = metadata_number<std::size_t>(meta, "batch_size", folder);
    const auto writers = static_cast<std::size_t>(reader.saved_world_size());
    if (__builtin_mul_overflow(batch, batch_size, &start.samples) ||
        __builtin_mul_overflow(start.samples, writers, &start.samples)) {
      start.samples = std::numeric_limits<std::size_t>::max();
    }
  }
  // A saved position always points at a sample still to come: an epoch's end rolls over.
  if (start.samples >= n) {
    throw CheckpointError(
        where + "resumes epoch " + std::to_string(start.epoch + 1) + " after sample " +
        std::to_string(start.samples) + ", but the training split has " + std::to_string(n) +
        " samples: it was written for another data set, or its manifest was edited");
  }
  if (start.samples > 0 && start.step <= start.epoch) {
    throw CheckpointError(where + "is inside epoch " + std::to_string(start.epoch + 1) +
                          " after only " + std::to_string(start.step) + " steps");
  }
  return start;
}

void Trainer::save_checkpoint(const Position& next, TrainResult& result) {
  const trace::Span span("checkpoint_save", "checkpoint", {{"step", next.step}});
  const std::map<std::string, std::string> meta = {
      {kEpochKey, std::to_string(next.epoch)},
      {kSamplesKey, std::to_string(next.samples)},
      {"seed", std::to_string(options_.seed)},
      {"batch_size", std::to_string(options_.batch_size)},
      {"strategy", parts_.strategy_name.empty() ? "unknown" : parts_.strategy_name},
  };
  const auto written = write_checkpoint(
      options_.checkpoint_dir, next.step, meta, *parts_.world,
      [&](CheckpointWriter& writer) { parts_.strategy->save(writer); },
      {written_checkpoints_, options_.checkpoint_keep}, parts_.world->timeout());
  std::erase(written_checkpoints_, written);
  written_checkpoints_.push_back(written);
  result.last_checkpoint = written;
}

std::pair<double, double> Trainer::evaluate() {
  const trace::Span span("evaluate", "run");
  const auto& data = *parts_.dataset;
  EpochShard shard({data.size(Split::test), 0, options_.seed, placement_.rank, placement_.size,
                    options_.eval_batch_size, false});
  // correct, loss * samples, samples: summed over reporting ranks in one collective, so a
  // replica of several ranks counts its samples once.
  double totals[3] = {0.0, 0.0, 0.0};
  for (std::size_t s = 0; s < shard.steps(); ++s) {
    const auto indices = shard.batch(s);
    // Called with an empty share too: evaluate is collective for sharded strategies (zero3
    // gathers every unit), so every rank must call it as often as the others.
    const auto stats = parts_.strategy->evaluate(data.gather(Split::test, indices));
    if (!placement_.reports_metrics) continue;
    totals[0] += static_cast<double>(stats.correct);
    totals[1] += stats.loss * static_cast<double>(indices.size());
    totals[2] += static_cast<double>(indices.size());
  }
  all_reduce_host(*parts_.world, parts_.memory.get(), {totals, 3, DType::f64, Device::cpu()},
                  ReduceOp::sum);
  if (totals[2] == 0.0) return {0.0, 0.0};
  return {totals[0] / totals[2], totals[1] / totals[2]};
}

DataParallelPlacement Trainer::checked_placement() {
  const auto placement = parts_.strategy->data_parallel_placement();
  const auto who = "strategy '" + parts_.strategy_name + "'";
  if (placement.size < 1 || placement.size > parts_.world->size() || placement.rank < 0 ||
      placement.rank >= placement.size) {
    throw InvalidArgument(who + " places world rank " + std::to_string(parts_.world->rank()) +
                          " at data-parallel rank " + std::to_string(placement.rank) + " of " +
                          std::to_string(placement.size) + " in a world of " +
                          std::to_string(parts_.world->size()) +
                          ": its data_parallel_placement() is wrong");
  }
  // Each replica must report once: none and its samples go uncounted, two and they count twice.
  std::int64_t reporters = placement.reports_metrics ? 1 : 0;
  all_reduce_host(*parts_.world, parts_.memory.get(), {&reporters, 1, DType::i64, Device::cpu()},
                  ReduceOp::sum);
  if (reporters != placement.size) {
    throw InvalidArgument(who + " has " + std::to_string(reporters) +
                          " ranks reporting metrics for " + std::to_string(placement.size) +
                          " data-parallel replicas: its data_parallel_placement() must mark "
                          "exactly one rank of each replica");
  }
  return placement;
}

Trainer::WorldStep Trainer::consult_world_provider(std::int64_t steps_done) {
  if (!world_provider_) return WorldStep::same;
  auto change = world_provider_(steps_done);
  if (!change) return WorldStep::same;
  // Collective over the old world, which must still be whole (a planned change).
  const auto state = gather_state_in_memory(*parts_.strategy, *parts_.world);
  if (!change->world) return WorldStep::left;
  if (recorder_) change->world = trace::traced_communicator(change->world, recorder_);
  const trace::Span span("reconfigure", "run", {{"world_size", change->world->size()}});
  parts_.strategy->reconfigure(change->world, *state);
  parts_.world = std::move(change->world);
  placement_ = checked_placement();
  return WorldStep::changed;
}

void Trainer::set_elastic(std::shared_ptr<ElasticWorld> elastic, const Regrouping& entered) {
  elastic_ = std::move(elastic);
  replicas_ = elastic_
                  ? std::make_unique<elastic::ReplicaRing>(
                        elastic_->options().replicas, elastic_->failure_domain(),
                        parts_.strategy_replicated_state, elastic_->options().share_copies_on_host)
                  : nullptr;
  joining_.reset();
  if (elastic_ && entered.joins_running_job()) joining_ = entered;
}

void Trainer::refresh_replicas(const Position& at, bool force) {
  const elastic::TrainingPosition position{at.step, at.epoch,
                                           static_cast<std::int64_t>(at.samples)};
  if (replicas_->live_state()) {
    // Nothing is copied: noting the step costs nothing, so it is noted after every step.
    replicas_->refresh(*parts_.strategy, parts_.world, position);
    return;
  }
  const auto every = elastic_->options().replica_every;
  if (!force && at.step % every != 0) return;
  const trace::Span span("replica_refresh", "run", {{"step", at.step}});
  replicas_->refresh(*parts_.strategy, elastic_->side_channel(), position);
}

Trainer::Position Trainer::adopt_world(Regrouping regroup, std::int64_t failed_at_step,
                                       std::chrono::steady_clock::time_point started,
                                       TrainResult& result) {
  if (regroup.stopping) stop_below_min_workers(regroup, failed_at_step, result);
  if (regroup.finished) {
    throw TrainingError(
        "elastic: the other workers finished the run while this one moved to "
        "generation " +
        std::to_string(regroup.generation));
  }
  const auto& options = elastic_->options();
  WorldEvent event;
  event.failed_at_step = failed_at_step;
  auto recovered = replicas_->recover(*regroup.world, regroup.previous_rank, *parts_.strategy);
  if (recorder_) regroup.world = trace::traced_communicator(regroup.world, recorder_);
  event.generation = regroup.generation;
  event.left = regroup.left;
  event.joined = regroup.joined;
  event.world_size = regroup.world->size();
  Position at;
  if (recovered.state) {
    at = {recovered.position.step, recovered.position.epoch,
          static_cast<std::size_t>(recovered.position.samples)};
    parts_.strategy->reconfigure(regroup.world, *recovered.state);
    event.state_from = "memory";
  } else {
    const auto why = "elastic: " + lost_state(recovered, options.replicas);
    const auto reader =
        options_.checkpoint_dir.empty() ? nullptr : open_newest_checkpoint(options_.checkpoint_dir);
    if (!reader) {
      throw TrainingError(why +
                          ", and there is no checkpoint to fall back to; set [train] "
                          "checkpoint_dir and checkpoint_every, or raise [strategy.elastic] "
                          "replicas");
    }
    at = checkpoint_position(*reader);
    parts_.strategy->reconfigure(regroup.world, *reader);
    event.state_from = reader->folder().string();
    if (regroup.world->rank() == 0) {
      std::fprintf(stderr, "%s; going on from the newest checkpoint, %s (step %lld)\n", why.c_str(),
                   event.state_from.c_str(), static_cast<long long>(at.step));
    }
  }
  parts_.world = regroup.world;
  placement_ = checked_placement();
  // The copies of the old world are no use any more; the new world's are made at once, so that
  // a second failure right away finds them.
  replicas_->clear();
  refresh_replicas(at, true);
  // The schedule keeps the length it had at the start; a newcomer learns it from rank 0, a
  // member of the world before.
  std::int64_t length = schedule_.total_steps;
  broadcast_host(*parts_.world, parts_.memory.get(), {&length, 1, DType::i64, Device::cpu()}, 0);
  schedule_.total_steps = length;
  event.resumed_at_step = at.step;
  event.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count();
  if (parts_.world->rank() == 0) {
    const auto names = [](const std::vector<std::string>& ids) {
      std::string text;
      for (const auto& id : ids) text += (text.empty() ? "" : ",") + id;
      return text.empty() ? std::string("-") : text;
    };
    const auto now = std::chrono::system_clock::now();
    const std::time_t seconds = std::chrono::system_clock::to_time_t(now);
    std::tm local{};
    ::localtime_r(&seconds, &local);
    char clock[16];
    std::strftime(clock, sizeof clock, "%H:%M:%S", &local);
    const auto ms =
        std::chrono::duration_cast<std::chrono::milliseconds>(now.time_since_epoch()).count() %
        1000;
    const std::string what = event.failed_at_step < 0
                                 ? "admitted at step " + std::to_string(event.resumed_at_step)
                                 : "failed at step " + std::to_string(event.failed_at_step) +
                                       ", going on from step " +
                                       std::to_string(event.resumed_at_step);
    std::fprintf(stderr,
                 "elastic: %s.%03lld generation %lld: %d worker(s); left %s; joined %s; %s (%s); "
                 "%.2f s\n",
                 clock, static_cast<long long>(ms), static_cast<long long>(event.generation),
                 event.world_size, names(event.left).c_str(), names(event.joined).c_str(),
                 what.c_str(), event.state_from.c_str(), event.seconds);
    std::fflush(stderr);
  }
  result.world_events.push_back(std::move(event));
  return at;
}

void Trainer::stop_below_min_workers(const Regrouping& regroup, std::int64_t failed_at_step,
                                     TrainResult& result) {
  const auto& options = elastic_->options();
  const auto& dir = options_.checkpoint_dir;
  const auto seconds = std::chrono::duration<double>(options.join_timeout).count();
  const std::string why =
      "elastic: the run stopped" +
      (failed_at_step >= 0 ? " after step " + std::to_string(failed_at_step) : std::string()) +
      ": " +
      (regroup.world ? std::to_string(regroup.world->size()) + " worker(s) left"
                     : std::string("too few workers left")) +
      (regroup.left.empty() ? std::string() : " (gone: " + listed(regroup.left) + ")") +
      ", fewer than min_workers = " + std::to_string(options.min_workers) +
      ", and no newcomer came within join_timeout = " + format_number(seconds) + " s; ";
  const std::string next_time =
      "; to ride out such losses, start more workers (tessera launch --elastic --join, "
      "--max-restarts), lower [strategy.elastic] min_workers (--min-workers) or raise "
      "join_timeout";
  if (!regroup.world) {
    throw TrainingError(
        why +
        "this worker regrouped after the other survivors had stopped without it "
        "and wrote nothing" +
        (dir.empty() ? std::string() : "; they save the state into " + dir.string()) + next_time);
  }
  if (dir.empty()) {
    throw TrainingError(why +
                        "no checkpoint was written: [train] checkpoint_dir "
                        "(--train.checkpoint_dir) is not set, so the survivors' state is lost; "
                        "set it to keep the state of a run that stops" +
                        next_time);
  }
  const auto resume = [&](const std::string& state, const std::filesystem::path& folder) {
    return why + state + " is in " + folder.string() +
           ": go on with `tessera train --resume` (the same config and checkpoint_dir, any "
           "number of workers from min_workers = " +
           std::to_string(options.min_workers) + ")" + next_time;
  };
  std::string outcome;
  try {
    const auto recovered =
        replicas_->recover(*regroup.world, regroup.previous_rank, *parts_.strategy);
    if (!recovered.state) {
      outcome = why + "no consistent checkpoint could be made from memory: " +
                lost_state(recovered, options.replicas) + "; " + newest_checkpoint_note(dir) +
                next_time;
    } else {
      const Position at{recovered.position.step, recovered.position.epoch,
                        static_cast<std::size_t>(recovered.position.samples)};
      // A checkpoint as new is kept as it is (the same state), one newer too: --resume takes the
      // newest, so an older one written now would only mislead. Rank 0 looks, for everyone.
      std::int64_t newest = -1;
      if (regroup.world->rank() == 0) {
        try {
          if (const auto reader = open_newest_checkpoint(dir)) newest = reader->manifest().step;
        } catch (const CheckpointError&) {  // NOLINT(bugprone-empty-catch): a damaged one is
                                            // superseded by the one written now
        }
      }
      broadcast_host(*regroup.world, parts_.memory.get(), {&newest, 1, DType::i64, Device::cpu()},
                     0);
      if (newest >= at.step) {
        outcome =
            resume("nothing new was written: the survivors' state after step " +
                       std::to_string(at.step) + (newest == at.step ? "" : ", or a newer one,"),
                   list_checkpoints(dir).back());
      } else {
        auto world = regroup.world;
        if (recorder_) world = trace::traced_communicator(world, recorder_);
        parts_.strategy->reconfigure(world, *recovered.state);
        parts_.world = world;
        save_checkpoint(at, result);
        outcome = resume("the survivors' state after step " + std::to_string(at.step),
                         *result.last_checkpoint);
      }
    }
  } catch (const Error& e) {
    // A survivor failed while the state was gathered or written: what is on disk stays as it was.
    outcome = why + "no checkpoint was written: saving the survivors' state failed (" + e.what() +
              "); " + newest_checkpoint_note(dir) + next_time;
  }
  throw TrainingError(outcome);
}

Trainer::Position Trainer::recover_from_failure(const std::string& reason,
                                                const Position& failed_at, TrainResult& result) {
  const auto started = std::chrono::steady_clock::now();
  if (recorder_) recorder_->set_active(true);
  const trace::Span span("elastic_recovery", "run", {{"step", failed_at.step}});
  const auto& options = elastic_->options();
  // Below min_workers the survivors wait for newcomers up to join_timeout.
  const Position at = adopt_world(
      elastic_->regroup(reason, deadline_after(options.failure_timeout + options.join_timeout)),
      failed_at.step, started, result);
  // This run's losses are kept for the steps the state is of; redone steps are logged again.
  const auto first_step = std::max<std::int64_t>(result.resumed_from_step, 0);
  const auto kept = std::max<std::int64_t>(at.step - first_step, 0);
  if (static_cast<std::int64_t>(result.losses.size()) > kept) {
    result.losses.resize(static_cast<std::size_t>(kept));
  }
  return at;
}

Trainer::Position Trainer::admit_newcomers(const Position& at, TrainResult& result) {
  const auto started = std::chrono::steady_clock::now();
  const trace::Span span("elastic_admission", "run", {{"step", at.step}});
  const auto& options = elastic_->options();
  // Every member's own state at this step is what the newcomers receive.
  if (at.step % options.replica_every != 0) refresh_replicas(at, true);
  return adopt_world(
      elastic_->admit(deadline_after(options.failure_timeout + options.join_timeout)), -1, started,
      result);
}

std::vector<RankSummary> Trainer::gather_rank_summaries() {
  const auto report = parts_.strategy->memory_report();
  std::int64_t mine[5] = {static_cast<std::int64_t>(peak_rss_bytes()),
                          static_cast<std::int64_t>(report.parameter_bytes),
                          static_cast<std::int64_t>(report.gradient_bytes),
                          static_cast<std::int64_t>(report.optimizer_state_bytes),
                          static_cast<std::int64_t>(report.buffer_bytes)};
  const auto n = static_cast<std::size_t>(parts_.world->size());
  std::vector<std::int64_t> all(5 * n);
  all_gather_host(*parts_.world, parts_.memory.get(), {mine, 5, DType::i64, Device::cpu()},
                  {all.data(), all.size(), DType::i64, Device::cpu()});
  std::vector<RankSummary> ranks(n);
  for (std::size_t r = 0; r < n; ++r) {
    const auto* v = &all[5 * r];
    ranks[r] = {static_cast<int>(r),
                static_cast<std::uint64_t>(v[0]),
                {static_cast<std::size_t>(v[1]), static_cast<std::size_t>(v[2]),
                 static_cast<std::size_t>(v[3]), static_cast<std::size_t>(v[4])}};
  }
  return ranks;
}

void Trainer::write_trace(const std::string& status, const std::string& error) const {
  nlohmann::json other = {{"status", status},
                          {"world_size", parts_.world->size()},
                          {"first_step", options_.trace.first_step},
                          {"clock", "microseconds since the barrier at the start of the run"}};
  if (options_.trace.last_step != TraceOptions::kNoLastStep) {
    other["last_step"] = options_.trace.last_step;
  }
  if (!error.empty()) other["error"] = error;
  const std::string members = other.dump();
  recorder_->write(trace_path_, members.substr(1, members.size() - 2));
}

TrainResult Trainer::run(bool resume) {
  if (!recorder_) return train(resume);
  const trace::ScopedRecorder installed(recorder_.get());
  recorder_->name_thread("rank " + std::to_string(recorder_->rank()));
  TrainResult result;
  try {
    // One time axis for every rank's file, across processes and hosts: zero is the end of
    // this barrier (the ranks leave it within the transport's latency of each other).
    // (A worker entering a running elastic job has no start in common with the others.)
    if (!joining_) parts_.world->barrier()->wait();
    recorder_->set_origin(trace::Clock::now());
    recorder_->set_active(true);
    result = train(resume);
  } catch (const std::exception& e) {
    // The trace of what happened up to the failure is most wanted now: kept, marked failed.
    recorder_->instant("run_failed", "run", {});
    try {
      write_trace("failed", e.what());
    } catch (const std::exception&) {
      // The run's own error is what the caller must see.
    }
    throw;
  }
  recorder_->set_active(false);
  try {
    write_trace("complete", "");
  } catch (const Error& e) {
    throw TrainingError(std::string("[train] trace_file (--trace): ") + e.what());
  }
  return result;
}

TrainResult Trainer::train(bool resume) {
  const auto& data = *parts_.dataset;
  if (data.size(Split::train) == 0) {
    // Dataset plugins refuse empty files themselves, naming them; this catches any other.
    throw DataError("dataset: the training split has no samples; nothing to train on");
  }
  if (data.size(Split::test) == 0) {
    // An accuracy over no samples would read as 0 % and look like a result.
    throw DataError(
        "dataset: the test split has no samples; the run's accuracy cannot be "
        "measured (give the data set a test split)");
  }

  // A worker entering a running elastic job sets its strategy up alone, then receives the
  // state from the members.
  StrategySetup setup{joining_ ? elastic_->private_world() : parts_.world,
                      parts_.model,
                      parts_.optimizer,
                      options_.seed,
                      options_.max_grad_norm,
                      options_.micro_batches,
                      options_.skip_nonfinite_steps,
                      parts_.memory ? parts_.memory : cpu_allocator()};
  {
    const trace::Span span("setup", "run");
    parts_.strategy->setup(setup);
  }

  TrainResult result;
  written_checkpoints_.clear();
  schedule_ = options_.schedule;
  Position at;
  const bool joined = joining_.has_value();
  if (joined) {
    at = adopt_world(*std::exchange(joining_, std::nullopt), -1, std::chrono::steady_clock::now(),
                     result);
    result.resumed_from_step = at.step;
  } else {
    placement_ = checked_placement();
    if (!resume && !options_.checkpoint_dir.empty()) refuse_to_overwrite(options_.checkpoint_dir);
    if (!resume && !options_.metrics_file.empty()) refuse_to_append(options_.metrics_file);
    at = resume ? restore(result) : Position{};
  }

  // The run ends after the rest of this epoch at this data-parallel size, then whole epochs; at
  // the size that wrote the checkpoint this is epochs * steps_per_epoch, as uninterrupted.
  // Recomputed when the world changes.
  auto planned_total_steps = [&] {
    const std::size_t steps_per_epoch = train_shard(options_, data, placement_, 0, 0).steps();
    std::int64_t total = at.step;
    if (at.epoch < options_.epochs) {
      total += static_cast<std::int64_t>(
                   train_shard(options_, data, placement_, at.epoch, at.samples).steps()) +
               (options_.epochs - at.epoch - 1) * static_cast<std::int64_t>(steps_per_epoch);
    }
    if (options_.max_steps > 0) total = std::min(total, options_.max_steps);
    return total;
  };
  std::int64_t total_steps = planned_total_steps();
  if (schedule_.total_steps == 0) schedule_.total_steps = total_steps;
  validate(schedule_);

  // The first copies of the state (and the side channel they travel on) are the elastic
  // runtime's setup, made before the clock of the throughput starts, as the strategy's setup is.
  if (elastic_ && !joined) refresh_replicas(at, true);  // adopt_world made the newcomer's
  // Progress and metrics come from the rank that is 0 at the start, for the whole run.
  trainer::ProgressReporter reporter(options_.progress, options_.metrics_file,
                                     parts_.world->rank() == 0, total_steps, options_.epochs);
  const bool checkpoints = !options_.checkpoint_dir.empty();
  std::int64_t last_saved = at.step;
  std::int64_t last_evaluated = -1;
  auto run_evaluation = [&](std::int64_t epoch) {
    const auto [accuracy, loss] = evaluate();
    result.test_accuracy = accuracy;
    result.test_loss = loss;
    last_evaluated = at.step;
    reporter.evaluation(at.step, epoch, accuracy, loss);
  };

  const std::size_t epoch_samples = data.size(Split::train);
  // The position copies of the state record: the next sample, rolled into the next epoch at an
  // epoch's end, as checkpoints record it.
  const auto next_position = [&] {
    return at.samples == epoch_samples ? Position{at.step, at.epoch + 1, 0} : at;
  };
  // One pass, unless an elastic run's world fails: then the survivors go on from the position
  // they recovered, possibly a step back, in the next pass.
  for (;;) {
    try {
      while (at.epoch < options_.epochs && at.step < total_steps) {
        const EpochShard shard = train_shard(options_, data, placement_, at.epoch, at.samples);
        // For the progress line: batches of this data-parallel size already behind in the epoch.
        const std::size_t global_batch =
            options_.batch_size * static_cast<std::size_t>(placement_.size);
        const std::size_t batches_before = at.samples / global_batch;
        bool world_changed = false;
        for (std::size_t b = 0; b < shard.steps() && at.step < total_steps; ++b) {
          // The step window: this step, and what follows it up to the next step, is recorded or
          // not.
          if (recorder_) recorder_->set_active(options_.trace.covers(at.step + 1));
          const trace::Span step_span("step", "run", {{"step", at.step + 1}, {"epoch", at.epoch}});
          Batch batch;
          {
            const trace::Span span("load_batch", "run");
            batch = data.gather(Split::train, shard.batch(b));
          }
          const StepInfo info{at.step + 1, learning_rate_at(schedule_, at.step + 1),
                              shard.global_batch_size(b)};
          StepStats stats;
          {
            const trace::Span span("train_step", "run", {{"step", info.step}});
            stats = parts_.strategy->train_step(batch, info);
          }
          ++at.step;
          at.samples += shard.global_batch_size(b);
          // At once, before anything else of the step can fail: a failure from here on (a
          // checkpoint, an evaluation, the next step) recovers this step's state.
          if (elastic_) refresh_replicas(next_position(), false);
          result.losses.push_back(stats.loss);
          reporter.step({at.step, at.epoch, batches_before + b + 1, batches_before + shard.steps(),
                         info.global_batch_size, info.learning_rate, stats});
          // The metrics keep the step's record; then the run stops, or the skipped step is counted.
          // Loss and norm are reduced over the ranks, so every rank decides the same here.
          if (!std::isfinite(stats.loss) || !std::isfinite(stats.grad_norm)) {
            check_nonfinite_step(stats, info);
            ++result.skipped_steps;
          }
          // The position saved is the next sample, rolled into the next epoch at an epoch's end.
          if (checkpoints && options_.checkpoint_every > 0 &&
              at.step % options_.checkpoint_every == 0) {
            save_checkpoint(next_position(), result);
            last_saved = at.step;
            reporter.checkpoint(at.step, *result.last_checkpoint);
          }
          if (options_.eval_every > 0 && at.step % options_.eval_every == 0)
            run_evaluation(at.epoch);
          if (elastic_) {
            // Newcomers enter inside an epoch, so that the epoch's end is evaluated as usual.
            if (at.samples < epoch_samples && elastic_->newcomers_waiting()) {
              at = admit_newcomers(at, result);
              reporter.hand_over(parts_.world->rank() == 0);
              world_changed = true;
              total_steps = planned_total_steps();
              break;
            }
          }
          const auto world_step = consult_world_provider(at.step);
          if (world_step == WorldStep::left) {
            reporter.finish();
            result.left_world = true;
            result.steps = at.step;
            result.steps_this_run = static_cast<std::int64_t>(result.losses.size());
            result.seconds = reporter.seconds();
            result.samples_per_s = reporter.samples_per_s();
            return result;
          }
          if (world_step == WorldStep::changed) {
            world_changed = true;
            total_steps = planned_total_steps();
            break;
          }
        }
        // The rest of the epoch is dealt anew over the new world's replicas.
        if (world_changed && at.samples < epoch_samples) continue;
        if (at.samples < epoch_samples) break;  // max_steps reached inside the epoch
        if (options_.eval_every == 0) run_evaluation(at.epoch);
        ++at.epoch;
        at.samples = 0;
      }
      if (recorder_) recorder_->set_active(true);  // the end of the run is always recorded
      if (last_evaluated != at.step)
        run_evaluation(at.samples == 0 ? std::max<std::int64_t>(at.epoch - 1, 0) : at.epoch);
      if (checkpoints && last_saved != at.step) {
        save_checkpoint(at, result);
        reporter.checkpoint(at.step, *result.last_checkpoint);
      }
      reporter.finish();

      result.steps = at.step;
      result.steps_this_run = static_cast<std::int64_t>(result.losses.size());
      result.seconds = reporter.seconds();
      result.samples_per_s = reporter.samples_per_s();
      result.ranks = gather_rank_summaries();
      result.rank = parts_.world->rank();
      // Newcomers still waiting to enter learn that there is nothing left to join.
      if (elastic_ && result.rank == 0) elastic_->finish();
      break;
    } catch (const Error& e) {
      if (!elastic_ || !(dynamic_cast<const TransportError*>(&e) != nullptr ||
                         dynamic_cast<const Timeout*>(&e) != nullptr)) {
        throw;
      }
      at = recover_from_failure(e.what(), at, result);
      reporter.hand_over(parts_.world->rank() == 0);
      total_steps = planned_total_steps();
    }
  }
  return result;
}

}  // namespace tessera
