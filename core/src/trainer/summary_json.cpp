#include <fstream>

#include "checkpoint/durable_file.hpp"
#include "tessera/base/error.hpp"
#include "tessera/runtime/json_text.hpp"
#include "tessera/runtime/trainer.hpp"

namespace tessera {

void write_summary_json(const std::filesystem::path& file, const TrainResult& result,
                        const std::string& extra_json_fields) {
  std::string text = "{\n";
  text += "  \"test_accuracy\": " + json_number(result.test_accuracy) + ",\n";
  text += "  \"test_loss\": " + json_number(result.test_loss) + ",\n";
  text += "  \"samples_per_s\": " + json_number(result.samples_per_s) + ",\n";
  text += "  \"steps\": " + std::to_string(result.steps) + ",\n";
  text += "  \"steps_this_run\": " + std::to_string(result.steps_this_run) + ",\n";
  text += "  \"skipped_steps\": " + std::to_string(result.skipped_steps) + ",\n";
  text += "  \"resumed_from_step\": " + std::to_string(result.resumed_from_step) + ",\n";
  text += "  \"seconds\": " + json_number(result.seconds) + ",\n";
  text += "  \"final_loss\": " + json_number(result.losses.empty() ? 0.0 : result.losses.back()) +
          ",\n";
  if (result.last_checkpoint) {
    text += "  \"last_checkpoint\": " + json_string(result.last_checkpoint->string()) + ",\n";
  }
  if (!extra_json_fields.empty()) text += "  " + extra_json_fields + ",\n";
  text += "  \"ranks\": [";
  for (std::size_t i = 0; i < result.ranks.size(); ++i) {
    const auto& r = result.ranks[i];
    text +=
        std::string(i ? "," : "") + "\n    {\"rank\": " + std::to_string(r.rank) +
        ", \"peak_rss_bytes\": " + std::to_string(r.peak_rss_bytes) +
        ", \"memory_report\": {\"parameter_bytes\": " + std::to_string(r.memory.parameter_bytes) +
        ", \"gradient_bytes\": " + std::to_string(r.memory.gradient_bytes) +
        ", \"optimizer_state_bytes\": " + std::to_string(r.memory.optimizer_state_bytes) +
        ", \"buffer_bytes\": " + std::to_string(r.memory.buffer_bytes) + "}}";
  }
  text += "\n  ]\n}\n";
  try {
    checkpoint::replace_file_atomically(file, text, "--summary file");
  } catch (const CheckpointError& e) {
    // Not a checkpoint: the same durable write, reported as what it is.
    throw Error(std::string(e.what()) +
                " (an existing summary file is left as it was; the training itself finished)");
  }
}

}  // namespace tessera
