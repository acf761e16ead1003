#include <cmath>
#include <nlohmann/json.hpp>

#include "durable_file.hpp"
#include "tessera/base/error.hpp"
#include "tessera/runtime/trainer.hpp"

namespace tessera {

void write_summary_json(const std::filesystem::path& file, const TrainResult& result) {
  // Field order is what people and tools/dev/main-job.sh read; JSON has no NaN or infinity, so
  // a non-finite figure is written as null.
  nlohmann::ordered_json j;
  j["test_accuracy"] = result.test_accuracy;
  j["test_loss"] = result.test_loss;
  j["samples_per_s"] = result.samples_per_s;
  if (result.tokens_per_s > 0.0) {
    j["tokens_per_s"] = result.tokens_per_s;
    j["test_perplexity"] = std::exp(result.test_loss);
  }
  if (result.test_bits_per_byte > 0.0) j["test_bits_per_byte"] = result.test_bits_per_byte;
  j["steps"] = result.steps;
  j["steps_this_run"] = result.steps_this_run;
  j["skipped_steps"] = result.skipped_steps;
  j["resumed_from_step"] = result.resumed_from_step;
  j["seconds"] = result.seconds;
  j["final_loss"] = result.losses.empty() ? 0.0 : result.losses.back();
  if (result.last_checkpoint) j["last_checkpoint"] = result.last_checkpoint->string();
  j["ranks"] = nlohmann::ordered_json::array();
  for (const auto& r : result.ranks) {
    j["ranks"].push_back({{"rank", r.rank},
                          {"peak_rss_bytes", r.peak_rss_bytes},
                          {"memory_report",
                           {{"parameter_bytes", r.memory.parameter_bytes},
                            {"gradient_bytes", r.memory.gradient_bytes},
                            {"optimizer_state_bytes", r.memory.optimizer_state_bytes},
                            {"buffer_bytes", r.memory.buffer_bytes}}}});
  }
  const auto text = j.dump(2, ' ', false, nlohmann::ordered_json::error_handler_t::replace) + "\n";
  try {
    checkpoint::replace_file_atomically(file, text, "--summary file");
  } catch (const CheckpointError& e) {
    // Not a checkpoint: the same durable write, reported as what it is.
    throw Error(std::string(e.what()) +
                " (an existing summary file is left as it was; the training itself finished)");
  }
}

}  // namespace tessera
