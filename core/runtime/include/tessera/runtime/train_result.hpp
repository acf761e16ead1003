#pragma once
// What Trainer::run() returns, and the --summary file written from it.
#include <cstdint>
#include <filesystem>
#include <optional>
#include <vector>

#include "tessera/plugin/strategy.hpp"
#include "tessera/runtime/world_source.hpp"

namespace tessera {

struct RankSummary {
  int rank = 0;
  std::uint64_t peak_rss_bytes = 0;  // VmHWM of the rank's process
  MemoryReport memory;
};

struct TrainResult {
  std::int64_t steps = 0;  // optimizer steps in total, including before a resume
  std::int64_t steps_this_run = 0;
  std::int64_t resumed_from_step = -1;  // -1: started fresh
  double test_accuracy = 0.0;
  double test_loss = 0.0;
  double samples_per_s = 0.0;  // global training samples per second of this run
  // A language model's (targets per sample > 1): target tokens per second of this run, and the
  // last evaluation in bits per byte when the data set is text (Dataset::bytes_per_target);
  // 0 otherwise.
  double tokens_per_s = 0.0;
  double test_bits_per_byte = 0.0;
  double seconds = 0.0;
  std::int64_t skipped_steps = 0;  // steps of this run with no update (on_nonfinite = skip)
  std::vector<double> losses;      // this run's per-step loss, in order
  std::vector<RankSummary> ranks;  // every rank's, on every rank
  std::optional<std::filesystem::path> last_checkpoint;
  std::vector<WorldEvent> world_events;  // each change of world with an event, in order
  int rank = 0;                          // this rank in the world that finished the run
  // The world source dropped this rank after step `steps`: run() returned right after the
  // state exchange, without the final evaluation, checkpoint or `ranks`, which the ranks that
  // go on produce.
  bool left_world = false;
};

// Writes `result` as the --summary JSON (docs/training.md).
void write_summary_json(const std::filesystem::path& file, const TrainResult& result);

// Peak resident set size of this process (VmHWM from /proc/self/status), 0 if unknown.
[[nodiscard]] std::uint64_t peak_rss_bytes();

}  // namespace tessera
