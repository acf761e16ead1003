#pragma once
// Strategy: how parameters, gradients and optimizer state are laid out over ranks and how one
// training step runs (ddp, zero1/2, zero3; samples/custom_strategy's local_sgd). The contract
// below is what the trainer relies on; docs/plugin-guide.md#writing-a-strategy has a checklist.

#include <cmath>
#include <cstddef>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "tessera/base/device_allocator.hpp"
#include "tessera/plugin/checkpoint_io.hpp"
#include "tessera/plugin/communicator.hpp"
#include "tessera/plugin/dataset.hpp"
#include "tessera/plugin/model.hpp"
#include "tessera/plugin/optimizer.hpp"

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
  // Where the strategy takes every byte of its parameters, gradients and optimizer state (and
  // of the buffers its collectives fill with them); null means the host's, cpu_allocator().
  // The strategy holds it from setup() on. setup() throws InvalidArgument, naming the device
  // and what to do, for an allocator whose device `world` cannot move
  // (Communicator::moves; tessera/strategy_kit/device_memory.hpp checks it). The trainer
  // passes [runtime] device's: cpu_allocator(), or the GPU's (TrainerComponents::allocator); a
  // strategy that computes on the host only refuses a device's (host_strategy_allocator).
  std::shared_ptr<DeviceAllocator> allocator = nullptr;
};

// train_step: loss is the mean per target over the global batch (sum_loss_over_ranks in
// tessera/strategy_kit/micro_batches.hpp sums the loss and the target count) and grad_norm the
// norm of the whole gradient, both the same on every rank of the world (the trainer's
// non-finite check relies on it); a strategy that does not communicate every step (the
// local_sgd sample) reports its own rank's mean and must say so. correct and targets count the
// target elements of this rank's data-parallel share. evaluate: loss is the mean per target
// over this rank's rows (0 for none), correct and targets count them. Of both, the trainer takes
// correct, targets (and evaluate's loss, weighted by targets) from reporting ranks only
// (DataParallelPlacement::reports_metrics) and sums over them, so every target counts once
// however many ranks of its replica computed it; what other ranks return there is ignored.
struct StepStats {
  double loss = 0.0;        // mean per target over the step's batch, every rank's rows
  std::size_t correct = 0;  // of this rank's `targets`
  std::size_t targets = 0;  // target elements this rank counted (kIgnoreTarget is not one)
  double grad_norm = 0.0;  // L2 norm before clipping, over the same gradients as `loss`
  bool skipped = false;    // no update was made (StrategySetup::skip_nonfinite_steps)
};

// For strategies, once the step's loss and gradient norm are known and before the update:
// true, with stats.skipped set, when the setup asks to skip non-finite steps and this is one.
[[nodiscard]] inline bool skip_nonfinite_update(const StrategySetup& setup, StepStats& stats) {
  stats.skipped =
      setup.skip_nonfinite_steps && !(std::isfinite(stats.loss) && std::isfinite(stats.grad_norm));
  return stats.skipped;
}

// Where a rank sits among the data-parallel replicas: the trainer deals each global batch over
// `size` replicas and gives this rank the share of replica `rank`, so all ranks of one replica
// (the tensor- or pipeline-parallel ranks of one model copy) see the same rows. Exactly one rank
// of each replica reports metrics (see StepStats). A pure data-parallel strategy returns
// {world rank, world size, true}.
struct DataParallelPlacement {
  int rank = 0;  // in [0, size)
  int size = 1;
  bool reports_metrics = true;
};

struct MemoryReport {
  std::size_t parameter_bytes = 0;  // held by this rank between steps
  std::size_t gradient_bytes = 0;
  std::size_t optimizer_state_bytes = 0;
  std::size_t buffer_bytes = 0;  // communication buffers, gather pools
};

// Collective: every method except memory_report() and data_parallel_placement() is called on
// all ranks, the same number of times and in the same order, so a strategy may communicate in
// any of them. Every rank calls even when its share of a batch is empty. Not thread-safe: one
// thread calls, and blocking calls return only when their work (communication included) is
// complete or has thrown.
// Errors: TransportError/Timeout from the communicator propagate unchanged; CheckpointError
// from load() when the checkpoint does not fit; InvalidArgument for a call before setup().
class Strategy : public PluginObject {
 public:
  // Called once, before anything else. Allocates this rank's share of parameters, gradients
  // and optimizer state (the strategy owns all parameter memory: Model holds none) and
  // initialises the parameters identically on every rank from setup.seed
  // (tessera/strategy_kit/init.hpp), so that any strategy and world size start from the same model.
  virtual void setup(const StrategySetup& setup) = 0;
  // One optimizer step on this rank's part of the global batch: forward, loss, backward,
  // gradient exchange, clipping (setup.max_grad_norm), optimizer update. `batch` may have zero
  // rows (uneven last batch); info.global_batch_size gives the rows over all ranks, so
  // gradients are weighted per row, not per rank (tessera/strategy_kit/micro_batches.hpp does it).
  // Keep one LayerContext per layer (per micro-batch in flight) from forward to its backward: a
  // layer object is shared and stateless. Parameters are equal on every rank (or, sharded, in the
  // state the next step expects) when it returns.
  virtual StepStats train_step(const Batch& batch, const StepInfo& info) = 0;
  // Forward only, no parameter change. Called with an empty batch on a rank whose share of the
  // test split is empty (the trainer calls it as often on every rank, so a strategy that
  // gathers parameters in forward, like zero3, must still take part). Returns the mean loss
  // over this rank's rows, not a global one.
  virtual StepStats evaluate(const Batch& batch) = 0;
  // Writes this rank's part of the state: parameters and optimizer state as slices of named
  // parameters (CheckpointWriter::put_slice; tessera/strategy_kit/param_checkpoint.hpp), so
  // that any strategy at any world size or mesh can load it, anything else as named blobs.
  // Replicated state is written by rank 0 alone, unless writer.every_rank_writes_replicated_state()
  // asks every rank for it (a copy of this rank's state kept in memory); no slice or name may be
  // written twice by one writer.
  virtual void save(CheckpointWriter& writer) = 0;
  // Called after setup(), before the first step; reads what this rank needs whatever world
  // size wrote it (reader.saved_world_size()), or throws CheckpointError naming what does not
  // fit (another model, another number of optimizer state slots, slices that leave a gap).
  virtual void load(const CheckpointReader& reader) = 0;
  // The world changed between steps (ranks left or joined): called on every rank of new_world,
  // after setup() and between steps, never inside one. The strategy lets work still in flight
  // on its old communicators land (errors there are dropped: the state comes from `state`),
  // releases those communicators and every buffer sized for the old world, lays parameters,
  // gradients and optimizer state out for new_world and reads them from `state` as load() does,
  // so the next step continues exactly where the old world's last step left off. The rest of
  // StrategySetup is kept. `state` holds that state, written by the old world's save(): a
  // checkpoint on disk, or memory (tessera/strategy_kit/memory_state.hpp); it is read during the
  // call only. Throws as setup() and load(); after a throw the strategy is unusable until a
  // reconfigure() succeeds.
  virtual void reconfigure(std::shared_ptr<Communicator> new_world,
                           const CheckpointReader& state) = 0;
  // Before any rank starts (`tessera config check` and `tessera train` call it in the host,
  // through check_run): how many data-parallel replicas this strategy makes of `world_size`
  // ranks training `model`, which is data_parallel_placement().size on every rank once set up,
  // and so what the run's global batch and steps per epoch are. Throws ConfigError naming the
  // strategy's options and the world size when the world or the model does not fit its layout
  // (a mesh that does not divide the world), so that the run is refused before anything starts.
  // Local, no communication; called on an object that is never set up. A pure data-parallel
  // strategy keeps the default.
  [[nodiscard]] virtual int plan_data_parallel_size(const Model& model, int world_size) const {
    (void)model;
    return world_size;
  }
  // This rank's data-parallel coordinates, valid from setup() and unchanged until the next
  // reconfigure(); local, not collective.
  [[nodiscard]] virtual DataParallelPlacement data_parallel_placement() const = 0;
  // Bytes this rank holds between steps, by category; local, not collective.
  [[nodiscard]] virtual MemoryReport memory_report() const = 0;
};

}  // namespace tessera
