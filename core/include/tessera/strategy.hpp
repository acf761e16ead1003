#pragma once
// Strategy: how parameters, gradients and optimizer state are laid out over ranks and how one
// training step runs (ddp, zero1/2, zero3, hybrid, elastic).

#include <cmath>
#include <cstddef>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "tessera/communicator.hpp"
#include "tessera/dataset.hpp"
#include "tessera/model.hpp"
#include "tessera/optimizer.hpp"

namespace tessera {

struct StrategySetup {
  std::shared_ptr<Communicator> world;
  std::shared_ptr<const Model> model;
  std::shared_ptr<const Optimizer> optimizer;
  std::uint64_t seed = 0;  // parameter initialisation; equal on every rank
  // Global gradient-norm clipping threshold (PyTorch's clip_grad_norm_ rule); 0 turns it off.
  double max_grad_norm = 0.0;
  // Gradient accumulation: train_step splits its batch into this many micro-batches, runs
  // forward and backward on each and communicates only after the last.
  std::size_t micro_batches = 1;
  // A step whose loss or gradient norm is not finite (the trainer's [train] on_nonfinite):
  // false, the update runs as usual and the trainer stops the run after it; true, the strategy
  // skips that step's parameter and optimizer-state update and sets StepStats::skipped. The
  // loss and the norm are the same on every rank, so every rank takes the same decision.
  bool skip_nonfinite_steps = false;
};

struct StepStats {
  double loss = 0.0;        // mean over the global batch; the same on every rank
  std::size_t correct = 0;  // over this rank's samples
  double grad_norm = 0.0;   // global L2 norm before clipping; the same on every rank
  bool skipped = false;     // no update was made (StrategySetup::skip_nonfinite_steps)
};

// For strategies, once the step's loss and gradient norm are known and before the update:
// true, with stats.skipped set, when the setup asks to skip non-finite steps and this is one.
[[nodiscard]] inline bool skip_nonfinite_update(const StrategySetup& setup, StepStats& stats) {
  stats.skipped =
      setup.skip_nonfinite_steps && !(std::isfinite(stats.loss) && std::isfinite(stats.grad_norm));
  return stats.skipped;
}

struct MemoryReport {
  std::size_t parameter_bytes = 0;  // held by this rank between steps
  std::size_t gradient_bytes = 0;
  std::size_t optimizer_state_bytes = 0;
  std::size_t buffer_bytes = 0;  // communication buffers, gather pools
};

// Checkpoint sinks and sources: named byte blobs for this rank; the engine adds checksums,
// atomic renames and the manifest.
class CheckpointWriter {
 public:
  virtual ~CheckpointWriter() = default;
  virtual void put(const std::string& name, std::span<const std::byte> bytes) = 0;
};
class CheckpointReader {
 public:
  virtual ~CheckpointReader() = default;
  [[nodiscard]] virtual std::vector<std::byte> get(const std::string& name) const = 0;
  [[nodiscard]] virtual bool contains(const std::string& name) const = 0;
  // World size the checkpoint was written at; strategies reshard when it differs.
  [[nodiscard]] virtual int saved_world_size() const = 0;
};

// Collective: every method except memory_report() must be called on all ranks in the same
// order. Not thread-safe.
class Strategy : public PluginObject {
 public:
  // Allocates this rank's share of parameters, gradients and optimizer state and initialises
  // the parameters identically on every rank.
  virtual void setup(const StrategySetup& setup) = 0;
  // One optimizer step on this rank's part of the global batch.
  virtual StepStats train_step(const Batch& batch, const StepInfo& info) = 0;
  // Forward only; loss and correct count over this rank's batch.
  virtual StepStats evaluate(const Batch& batch) = 0;
  virtual void save(CheckpointWriter& writer) = 0;
  virtual void load(const CheckpointReader& reader) = 0;
  // Makes every rank's view of optimizer state consistent (a no-op where it already is).
  virtual void synchronize_optimizer_state() = 0;
  [[nodiscard]] virtual MemoryReport memory_report() const = 0;
};

}  // namespace tessera
