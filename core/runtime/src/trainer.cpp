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

#include "progress_reporter.hpp"
#include "tessera/base/error.hpp"
#include "tessera/base/trace.hpp"
#include "tessera/runtime/checkpoint.hpp"
#include "tessera/runtime/data_order.hpp"
#include "tessera/runtime/trace_files.hpp"
#include "tessera/strategy_kit/host_values.hpp"
#include "tessera/strategy_kit/memory_state.hpp"
#include "tessera/strategy_kit/param_checkpoint.hpp"
#include "traced_components.hpp"

namespace tessera {

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

// A world source handed no world to this rank after `failure`: the others went on without it.
TrainingError left_out_of_the_run(const Error& failure) {
  return TrainingError(std::string("this rank was left out of the run's new world after: ") +
                       failure.what());
}

}  // namespace

// The state of one run(): where it is, how long it is planned to be, what it reported.
struct Trainer::Run {
  TrainResult result;
  TrainingPosition at;
  std::int64_t total_steps = 0;
  std::int64_t last_saved = 0;
  std::int64_t last_evaluated = -1;
  bool resumed = false;  // from a checkpoint, by --resume
  std::unique_ptr<trainer::ProgressReporter> reporter;
  std::size_t epoch_samples = 0;  // the training split's size

  // The position copies of the state and checkpoints record: the next sample, rolled into the
  // next epoch at an epoch's end.
  [[nodiscard]] TrainingPosition next() const {
    return at.samples == epoch_samples ? TrainingPosition{at.step, at.epoch + 1, 0} : at;
  }
};

class Trainer::Control final : public RunControl {
 public:
  explicit Control(Trainer& trainer) : trainer_(trainer) {}
  Strategy& strategy() override { return *trainer_.parts_.strategy; }
  [[nodiscard]] const std::shared_ptr<Communicator>& world() const override {
    return trainer_.parts_.world;
  }
  [[nodiscard]] DeviceAllocator* memory() const override { return trainer_.parts_.allocator.get(); }
  [[nodiscard]] const std::filesystem::path& checkpoint_dir() const override {
    return trainer_.options_.checkpoint_dir;
  }
  [[nodiscard]] TrainingPosition checkpoint_position(
      const FileCheckpointReader& reader) const override {
    return trainer_.checkpoint_position(reader);
  }
  void reconfigure(std::shared_ptr<Communicator> world, const CheckpointReader& state) override {
    trainer_.reconfigure(std::move(world), state);
  }
  std::filesystem::path save_checkpoint(const TrainingPosition& at) override {
    TrainResult scratch;
    trainer_.save_checkpoint(at, scratch);
    return *scratch.last_checkpoint;
  }
  [[nodiscard]] std::map<std::string, std::string> checkpoint_metadata(
      const TrainingPosition& at) const override {
    return trainer_.checkpoint_metadata(at);
  }

 private:
  Trainer& trainer_;
};

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
    : options_(std::move(options)),
      parts_(std::move(components)),
      source_(std::make_shared<WorldSource>()) {
  TESSERA_CHECK(
      parts_.world && parts_.model && parts_.optimizer && parts_.dataset && parts_.strategy,
      "Trainer needs a communicator, model, optimizer, dataset and strategy");
  if (parts_.dataset->layout() != parts_.model->layout()) {
    throw ConfigError("the data set gives samples of " + describe(parts_.dataset->layout()) +
                      ", the model takes " + describe(parts_.model->layout()));
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

void Trainer::set_world_source(std::shared_ptr<WorldSource> source) {
  source_ = source ? std::move(source) : std::make_shared<WorldSource>();
}

void Trainer::set_world_plan(ChangePlan plan) {
  set_world_source(plan ? planned_world_changes(std::move(plan)) : nullptr);
}

TrainingPosition Trainer::checkpoint_position(const FileCheckpointReader& reader) const {
  TrainingPosition start;
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

std::map<std::string, std::string> Trainer::checkpoint_metadata(
    const TrainingPosition& next) const {
  return {
      {kEpochKey, std::to_string(next.epoch)},
      {kSamplesKey, std::to_string(next.samples)},
      {"seed", std::to_string(options_.seed)},
      {"batch_size", std::to_string(options_.batch_size)},
      {"strategy", parts_.strategy_name.empty() ? "unknown" : parts_.strategy_name},
  };
}

void Trainer::save_checkpoint(const TrainingPosition& next, TrainResult& result) {
  const trace::Span span("checkpoint_save", "checkpoint", {{"step", next.step}});
  const auto written = write_checkpoint(
      options_.checkpoint_dir, next.step, checkpoint_metadata(next), *parts_.world,
      [&](CheckpointWriter& writer) { parts_.strategy->save(writer); },
      {written_checkpoints_, options_.checkpoint_keep}, parts_.world->timeout());
  std::erase(written_checkpoints_, written);
  written_checkpoints_.push_back(written);
  result.last_checkpoint = written;
}

std::pair<double, double> Trainer::evaluate() {
  const trace::Span span("evaluate", "run");
  const auto& data = *parts_.dataset;
  const std::size_t available = data.size(Split::test);
  const std::size_t count =
      options_.eval_samples == 0 ? available : std::min(options_.eval_samples, available);
  EpochShard shard(
      {count, 0, options_.seed, placement_.rank, placement_.size, options_.eval_batch_size, false});
  // correct, loss * targets, targets: summed over reporting ranks in one collective, so a
  // replica of several ranks counts its targets once.
  double totals[3] = {0.0, 0.0, 0.0};
  for (std::size_t s = 0; s < shard.steps(); ++s) {
    const auto dealt = shard.batch(s);
    std::vector<std::size_t> indices(dealt.begin(), dealt.end());
    // A subset: sample k of `count` is the test split's (k * available / count)-th.
    if (count < available) {
      for (auto& i : indices) i = i * available / count;
    }
    // Called with an empty share too: evaluate is collective for sharded strategies (zero3
    // gathers every unit), so every rank must call it as often as the others.
    const auto stats = parts_.strategy->evaluate(data.gather(Split::test, indices));
    if (!placement_.reports_metrics) continue;
    totals[0] += static_cast<double>(stats.correct);
    totals[1] += stats.loss * static_cast<double>(stats.targets);
    totals[2] += static_cast<double>(stats.targets);
  }
  all_reduce_host(*parts_.world, parts_.allocator.get(), {totals, 3, DType::f64, Device::cpu()},
                  ReduceOp::sum);
  if (totals[2] == 0.0) return {0.0, 0.0};
  return {totals[0] / totals[2], totals[1] / totals[2]};
}

void Trainer::evaluate_into(Run& run, std::int64_t epoch) {
  const auto [accuracy, loss] = evaluate();
  run.result.test_accuracy = accuracy;
  run.result.test_loss = loss;
  run.last_evaluated = run.at.step;
  // A newcomer evaluates in the change that admits it before its reporter exists.
  if (run.reporter) run.reporter->evaluation(run.at.step, epoch, accuracy, loss);
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
  all_reduce_host(*parts_.world, parts_.allocator.get(), {&reporters, 1, DType::i64, Device::cpu()},
                  ReduceOp::sum);
  if (reporters != placement.size) {
    throw InvalidArgument(who + " has " + std::to_string(reporters) +
                          " ranks reporting metrics for " + std::to_string(placement.size) +
                          " data-parallel replicas: its data_parallel_placement() must mark "
                          "exactly one rank of each replica");
  }
  return placement;
}

void Trainer::reconfigure(std::shared_ptr<Communicator> world, const CheckpointReader& state) {
  if (recorder_) world = trace::traced_communicator(world, recorder_);
  const trace::Span span("reconfigure", "run", {{"world_size", world->size()}});
  parts_.strategy->reconfigure(world, state);
  parts_.world = std::move(world);
  placement_ = checked_placement();
}

Trainer::AfterStep Trainer::apply(Run& run, WorldChange change) {
  if (!change.world) return AfterStep::left;
  TESSERA_CHECK(change.state != nullptr, "a WorldChange with a world must name its state");
  reconfigure(std::move(change.world), *change.state);
  if (change.position) run.at = *change.position;
  // The schedule keeps the length it had at the start; a newcomer learns it from rank 0, a
  // member of the world before. So does whether the epoch that ended at this position still
  // owes its evaluation: the failure came after its last step (in that evaluation, say), and
  // the position, already the next epoch's start, would pass it over.
  const bool epoch_ended_here = run.at.samples == 0 && run.at.epoch > 0;
  std::int64_t agreed[2] = {
      schedule_.total_steps,
      options_.eval_every == 0 && epoch_ended_here && run.last_evaluated != run.at.step ? 1 : 0};
  broadcast_host(*parts_.world, parts_.allocator.get(), {agreed, 2, DType::i64, Device::cpu()}, 0);
  schedule_.total_steps = agreed[0];
  const bool owes_evaluation = agreed[1] != 0;
  // This run's losses are kept for the steps the state is of; redone steps are logged again.
  auto& losses = run.result.losses;
  const auto first_step = std::max<std::int64_t>(run.result.resumed_from_step, 0);
  const auto kept = std::max<std::int64_t>(run.at.step - first_step, 0);
  if (static_cast<std::int64_t>(losses.size()) > kept) {
    losses.resize(static_cast<std::size_t>(kept));
  }
  if (change.event) change.event->resumed_at_step = run.at.step;
  source_->adopted(*control_, run.at, change.event ? &*change.event : nullptr);
  if (change.event) run.result.world_events.push_back(std::move(*change.event));
  if (run.reporter) run.reporter->hand_over(parts_.world->rank() == 0);
  run.total_steps = planned_total_steps(run.at);
  // Every member evaluates (a collective), a newcomer entering in this change too.
  if (owes_evaluation) evaluate_into(run, run.at.epoch - 1);
  return AfterStep::world_changed;
}

std::int64_t Trainer::planned_total_steps(const TrainingPosition& at) const {
  const auto& data = *parts_.dataset;
  const std::size_t steps_per_epoch = train_shard(options_, data, placement_, 0, 0).steps();
  std::int64_t total = at.step;
  if (at.epoch < options_.epochs) {
    total += static_cast<std::int64_t>(
                 train_shard(options_, data, placement_, at.epoch, at.samples).steps()) +
             (options_.epochs - at.epoch - 1) * static_cast<std::int64_t>(steps_per_epoch);
  }
  if (options_.max_steps > 0) total = std::min(total, options_.max_steps);
  return total;
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
  all_gather_host(*parts_.world, parts_.allocator.get(), {mine, 5, DType::i64, Device::cpu()},
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
    // (A worker entering a running job has no start in common with the others.)
    if (!source_->joins_running_run()) parts_.world->barrier()->wait();
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

void Trainer::start(Run& run, bool resume) {
  if (source_->joins_running_run()) {
    auto change = source_->start(*control_, run.at);
    TESSERA_CHECK(change.has_value(), "a world source joining a running run must hand a world");
    try {
      (void)apply(run, std::move(*change));
    } catch (const Error& e) {
      // A member failed while this rank moved onto the world that admitted it: it is a member
      // of that world now, and goes on with the others as they do (the source is asked).
      if (go_on_after(run, e) == AfterStep::left) throw left_out_of_the_run(e);
    }
    run.result.resumed_from_step = run.at.step;
    validate(schedule_);
    return;
  }
  placement_ = checked_placement();
  if (resume) {
    if (options_.checkpoint_dir.empty()) throw ConfigError("--resume needs [train] checkpoint_dir");
    if (const auto reader = open_newest_checkpoint(options_.checkpoint_dir)) {
      run.at = checkpoint_position(*reader);
      const trace::Span span("checkpoint_load", "checkpoint", {{"step", run.at.step}});
      parts_.strategy->load(*reader);
      run.result.resumed_from_step = run.at.step;
      run.resumed = true;
    }  // else nothing written yet: a fresh start
  } else {
    if (!options_.checkpoint_dir.empty()) refuse_to_overwrite(options_.checkpoint_dir);
    if (!options_.metrics_file.empty()) refuse_to_append(options_.metrics_file);
  }
  run.total_steps = planned_total_steps(run.at);
  if (schedule_.total_steps == 0) schedule_.total_steps = run.total_steps;
  validate(schedule_);
  // What the source does first (an elastic run's first copies) is the run's setup, made before
  // the clock of the throughput starts, as the strategy's setup is.
  if (auto change = source_->start(*control_, run.at)) (void)apply(run, std::move(*change));
}

Trainer::AfterStep Trainer::step(Run& run, const EpochShard& shard, std::size_t b,
                                 std::size_t batches_before) {
  auto& at = run.at;
  // The step window: this step, and what follows it up to the next step, is recorded or not.
  if (recorder_) recorder_->set_active(options_.trace.covers(at.step + 1));
  const trace::Span step_span("step", "run", {{"step", at.step + 1}, {"epoch", at.epoch}});
  Batch batch;
  {
    const trace::Span span("load_batch", "run");
    batch = parts_.dataset->gather(Split::train, shard.batch(b));
  }
  StepInfo info{at.step + 1, learning_rate_at(schedule_, at.step + 1), shard.global_batch_size(b)};
  info.batch_offset = shard.batch_offset(b);
  StepStats stats;
  {
    const trace::Span span("train_step", "run", {{"step", info.step}});
    stats = parts_.strategy->train_step(batch, info);
  }
  ++at.step;
  at.samples += shard.global_batch_size(b);
  // At once, before anything else of the step can fail: a failure from here on (a checkpoint,
  // an evaluation, the next step) goes on from this step's state.
  source_->step_completed(*control_, run.next());
  run.result.losses.push_back(stats.loss);
  run.reporter->step({at.step, at.epoch, batches_before + b + 1, batches_before + shard.steps(),
                      info.global_batch_size, info.learning_rate, stats});
  // The metrics keep the step's record; then the run stops, or the skipped step is counted.
  // Loss and norm are reduced over the ranks, so every rank decides the same here.
  if (!std::isfinite(stats.loss) || !std::isfinite(stats.grad_norm)) {
    check_nonfinite_step(stats, info);
    ++run.result.skipped_steps;
  }
  if (!options_.checkpoint_dir.empty() && options_.checkpoint_every > 0 &&
      at.step % options_.checkpoint_every == 0) {
    save_checkpoint(run.next(), run.result);
    run.last_saved = at.step;
    run.reporter->checkpoint(at.step, *run.result.last_checkpoint);
  }
  if (options_.eval_every > 0 && at.step % options_.eval_every == 0) evaluate_into(run, at.epoch);
  auto change = source_->at_boundary(*control_, run.next(), at.samples < run.epoch_samples);
  return change ? apply(run, std::move(*change)) : AfterStep::go_on;
}

Trainer::AfterStep Trainer::train_epochs(Run& run) {
  auto& at = run.at;
  while (at.epoch < options_.epochs && at.step < run.total_steps) {
    const EpochShard shard =
        train_shard(options_, *parts_.dataset, placement_, at.epoch, at.samples);
    // For the progress line: batches of this data-parallel size already behind in the epoch.
    const std::size_t global_batch =
        options_.batch_size * static_cast<std::size_t>(placement_.size);
    const std::size_t batches_before = at.samples / global_batch;
    auto after = AfterStep::go_on;
    for (std::size_t b = 0; b < shard.steps() && at.step < run.total_steps; ++b) {
      after = step(run, shard, b, batches_before);
      if (after != AfterStep::go_on) break;
    }
    if (after == AfterStep::left) return after;
    // The rest of the epoch is dealt anew over the new world's replicas.
    if (after == AfterStep::world_changed && at.samples < run.epoch_samples) continue;
    if (at.samples < run.epoch_samples) break;  // max_steps reached inside the epoch
    if (options_.eval_every == 0) evaluate_into(run, at.epoch);
    ++at.epoch;
    at.samples = 0;
  }
  return AfterStep::go_on;
}

bool Trainer::owes_resumed_evaluation(const Run& run) const {
  // A checkpoint at an evaluation's step (an epoch's end, or every eval_every steps) is written
  // before that evaluation: a job stopped during it left the checkpoint, not the evaluation,
  // and the resumed run, already past the step, would skip it. Rank 0 keeps the metrics file:
  // it says whether the evaluation was made, for everyone (evaluating is collective).
  const auto& at = run.at;
  const bool evaluates_here = options_.eval_every > 0
                                  ? at.step > 0 && at.step % options_.eval_every == 0
                                  : at.samples == 0 && at.epoch > 0;
  if (!evaluates_here) return false;
  std::int64_t owed =
      parts_.world->rank() == 0 && run.reporter->evaluation_recorded(at.step) ? 0 : 1;
  broadcast_host(*parts_.world, parts_.allocator.get(), {&owed, 1, DType::i64, Device::cpu()}, 0);
  return owed != 0;
}

void Trainer::finish(Run& run) {
  auto& at = run.at;
  if (recorder_) recorder_->set_active(true);  // the end of the run is always recorded
  if (run.last_evaluated != at.step) {
    evaluate_into(run, at.samples == 0 ? std::max<std::int64_t>(at.epoch - 1, 0) : at.epoch);
  }
  if (!options_.checkpoint_dir.empty() && run.last_saved != at.step) {
    save_checkpoint(at, run.result);
    run.reporter->checkpoint(at.step, *run.result.last_checkpoint);
  }
  run.reporter->finish();
  auto& result = run.result;
  result.steps = at.step;
  result.steps_this_run = static_cast<std::int64_t>(result.losses.size());
  result.seconds = run.reporter->seconds();
  result.samples_per_s = run.reporter->samples_per_s();
  result.tokens_per_s = run.reporter->tokens_per_s();
  result.test_bits_per_byte = run.reporter->bits_per_byte(result.test_loss);
  result.ranks = gather_rank_summaries();
  result.rank = parts_.world->rank();
  source_->finished(*control_);
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
  control_ = std::make_unique<Control>(*this);
  StrategySetup setup{source_->setup_world(parts_.world),
                      parts_.model,
                      parts_.optimizer,
                      options_.seed,
                      options_.max_grad_norm,
                      options_.micro_batches,
                      options_.skip_nonfinite_steps,
                      parts_.allocator ? parts_.allocator : cpu_allocator()};
  {
    const trace::Span span("setup", "run");
    parts_.strategy->setup(setup);
  }

  Run run;
  run.epoch_samples = data.size(Split::train);
  written_checkpoints_.clear();
  schedule_ = options_.schedule;
  start(run, resume);
  run.last_saved = run.at.step;
  // Progress and metrics come from the rank that is 0 at the start, for the whole run.
  run.reporter = std::make_unique<trainer::ProgressReporter>(
      options_.progress, options_.metrics_file, parts_.world->rank() == 0, run.total_steps,
      options_.epochs);
  run.reporter->count_tokens(parts_.model->layout().targets_per_sample(), data.bytes_per_target());
  bool owes_evaluation = run.resumed && owes_resumed_evaluation(run);
  // One pass, unless the world fails and the source hands a new one: then the run goes on from
  // the position of its state, possibly a step back, in the next pass.
  for (;;) {
    try {
      if (std::exchange(owes_evaluation, false)) {
        evaluate_into(run, run.at.samples == 0 ? run.at.epoch - 1 : run.at.epoch);
      }
      if (train_epochs(run) == AfterStep::left) {
        run.reporter->finish();
        auto& result = run.result;
        result.left_world = true;
        result.steps = run.at.step;
        result.steps_this_run = static_cast<std::int64_t>(result.losses.size());
        result.seconds = run.reporter->seconds();
        result.samples_per_s = run.reporter->samples_per_s();
        return std::move(run.result);
      }
      finish(run);
      return std::move(run.result);
    } catch (const Error& e) {
      if (recorder_) recorder_->set_active(true);  // what follows a failure is always recorded
      if (go_on_after(run, e) == AfterStep::left) throw left_out_of_the_run(e);
    }
  }
}

Trainer::AfterStep Trainer::go_on_after(Run& run, const Error& failure) {
  // Called inside the handler of `failure`: the source rethrows what it cannot go on from.
  auto change = source_->failed(*control_, failure, run.at);
  try {
    return apply(run, std::move(change));
  } catch (const Error& again) {
    // The new world failed too while the run moved onto it (a member died during the
    // reconfiguration or the first copies): the source is asked again.
    return go_on_after(run, again);
  }
}

}  // namespace tessera
