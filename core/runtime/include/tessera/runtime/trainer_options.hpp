#pragma once
// The [train] section of a run: what the Trainer is told to do (docs/training.md lists every
// option).
#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <string>

#include "tessera/plugin/options.hpp"
#include "tessera/runtime/schedule.hpp"

namespace tessera {

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

// The [train] section.
struct TrainerOptions {
  std::int64_t epochs = 1;
  std::int64_t max_steps = 0;   // 0: no limit besides epochs
  std::size_t batch_size = 64;  // per rank
  std::size_t micro_batches = 1;
  std::size_t eval_batch_size = 1000;
  // Test samples per evaluation, every (size / eval_samples)-th of the test split, the same
  // ones each time; 0: all (a language model's validation text can take longer than training).
  std::size_t eval_samples = 0;
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

}  // namespace tessera
