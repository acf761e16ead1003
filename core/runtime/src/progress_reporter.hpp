#pragma once
// Rank 0's view of a run: the progress line on stderr and the per-step metrics file.

#include <chrono>
#include <cstdint>
#include <filesystem>
#include <optional>
#include <string>

#include "tessera/plugin/strategy.hpp"
#include "tessera/runtime/trainer.hpp"

namespace tessera::trainer {

struct StepReport {
  std::int64_t step = 0;
  std::int64_t epoch = 0;  // 0-based
  std::size_t batch = 0;   // 1-based within the epoch
  std::size_t batches = 0;
  std::size_t samples = 0;  // global samples of this step
  float learning_rate = 0.0F;
  StepStats stats;
};

// Does nothing on ranks other than 0 (active = false), so callers need no rank checks.
class ProgressReporter {
 public:
  // total_steps: the step count at which the run ends (for the ETA).
  ProgressReporter(ProgressMode mode, const std::filesystem::path& metrics_file, bool active,
                   std::int64_t total_steps, std::int64_t epochs);
  ~ProgressReporter();
  ProgressReporter(const ProgressReporter&) = delete;
  ProgressReporter& operator=(const ProgressReporter&) = delete;

  // Makes this rank the reporting one, or not: an elastic run's rank 0 may die, and the new
  // world's rank 0 goes on reporting (appending to the metrics file). A rank 0 that died after
  // a step completed everywhere but before it wrote the step's record leaves that record to its
  // successor: the step's loss, norm and samples are the same on every rank, and this rank's
  // last step is written (marked "recovered") when the file holds no record of it.
  void hand_over(bool active);

  // Targets are tokens (more than one per sample): steps also report tokens/s, evaluations the
  // perplexity, and, when the data set says how many bytes of text a target stands for, bits
  // per byte (loss / ln 2 / bytes_per_target).
  void count_tokens(std::size_t targets_per_sample, double bytes_per_target);

  void step(const StepReport& report);
  void evaluation(std::int64_t step, std::int64_t epoch, double accuracy, double loss);
  // Whether the metrics file holds an evaluation at `step` (this run's or an earlier one's, the
  // run --resume continues); false without a metrics file. Reads the file.
  [[nodiscard]] bool evaluation_recorded(std::int64_t step) const;
  void checkpoint(std::int64_t step, const std::filesystem::path& folder);
  // Ends the in-place bar with a newline; syncs and closes the metrics file (throwing
  // TrainingError if that fails).
  void finish();

  [[nodiscard]] double samples_per_s() const noexcept;
  // 0 unless count_tokens said the targets are tokens (or text, for bits per byte).
  [[nodiscard]] double tokens_per_s() const noexcept;
  [[nodiscard]] double bits_per_byte(double loss) const noexcept;
  [[nodiscard]] double seconds() const noexcept;

 private:
  void open_metrics();
  void print_line(const std::string& text, bool transient);
  // One step's record in the metrics file; `recovered`: written by a successor (hand_over).
  void write_step_record(const StepReport& report, bool recovered);
  // Appends one JSON line to the metrics file; throws TrainingError naming the file and the
  // system's reason when it cannot, since metrics lost must not look like a clean run.
  void write_metrics(const std::string& record, const std::string& what);
  // Syncs and closes the metrics file, checking both (a full disk may show only there).
  void close_metrics();

  using Clock = std::chrono::steady_clock;
  ProgressMode mode_;
  bool active_ = false;
  bool in_place_ = false;
  bool enabled_ = true;
  bool bar_open_ = false;
  std::int64_t total_steps_;
  std::int64_t epochs_;
  std::int64_t steps_ = 0;  // this run's
  std::size_t samples_ = 0;
  std::size_t tokens_per_sample_ = 0;  // 0: the targets are not tokens
  double bytes_per_target_ = 0.0;
  Clock::time_point start_ = Clock::now();
  Clock::time_point last_print_{};
  std::filesystem::path metrics_path_;
  int metrics_fd_ = -1;
  // The newest step the metrics file holds a record of, whoever wrote it; -1 if none.
  std::int64_t newest_recorded_step_ = -1;
  std::optional<StepReport> last_step_;  // this rank's newest step, recorded or not
};

}  // namespace tessera::trainer
