#pragma once
// `tessera trace timeline FILE...`: the per-rank traces of one run (`train --trace`) drawn as
// text, one row per rank and pipeline stage, time in fixed-width columns, so that a schedule
// (GPipe, 1F1B, a ddp step) can be read in a terminal or pasted into a document.

#include <filesystem>
#include <optional>
#include <string>
#include <vector>

namespace tessera::cli {

struct TimelineOptions {
  int width = 100;                // columns of the time axis
  std::optional<long long> step;  // draw only this step's train_step (all recorded if empty)
};

// Reads the traces (per-rank files, or a merged one) and returns the drawing, ending in '\n'.
// Each column shows what covered most of its time on that row: a forward or backward pass of a
// micro-batch (the layer spans' `micro_batch` and `stage` args; `micro_batch` spans stand in
// where layer spans carry none), an optimizer step, a wait on communication, or idle. Throws
// Error naming the file for one that cannot be read or is not a tessera trace, or for a rank
// given twice; Error when the traces hold no train_step (of `step`) or no layer pass in it.
[[nodiscard]] std::string render_timeline(const std::vector<std::filesystem::path>& inputs,
                                          const TimelineOptions& options);

}  // namespace tessera::cli
