#pragma once
// A strategy to copy: plain data parallelism. Every rank holds the whole model, runs forward and
// backward on its share of the global batch, and one all-reduce averages the whole gradient
// before an identical optimizer step everywhere (ddp does the same in buckets that overlap
// backward). Its train_step is where a new strategy differs; of the other seven methods of
// tessera::Strategy (all pure virtual: a strategy states each one) a strategy that keeps the
// whole model on every rank keeps these as they are, and one that shards or splits it rewrites
// save, load and memory_report for its layout (docs/plugin-guide.md, "Writing a strategy").

#include <memory>
#include <vector>

#include "tessera/plugin/options.hpp"
#include "tessera/plugin/strategy.hpp"
#include "tessera/strategy_kit/flat_state.hpp"
#include "tessera/strategy_kit/layer_runner.hpp"
#include "tessera/strategy_kit/micro_batches.hpp"
#include "tessera/strategy_kit/tied_gradients.hpp"
#include "tessera/strategy_kit/weight_decay.hpp"

namespace my_plugin {

class GradientAverage final : public tessera::Strategy {
 public:
  // Reads the options declared in plugin.cpp (none here); the registry has validated them.
  explicit GradientAverage(const tessera::Options& options);

  // Allocates the parameters, gradients and optimizer state and initialises the parameters
  // from the seed, identically on every rank: no broadcast needed.
  void setup(const tessera::StrategySetup& setup) override;
  // Forward and backward by micro-batches, one all-reduce (average) of the gradient, clipping,
  // the optimizer step. Collective: every rank calls it, an empty share included.
  tessera::StepStats train_step(const tessera::Batch& batch,
                                const tessera::StepInfo& info) override;
  // Forward only on this rank's rows; no communication.
  tessera::StepStats evaluate(const tessera::Batch& batch) override;
  // The state is the same on every rank: rank 0 writes it, as slices of named parameters, so
  // that any strategy at any world size loads it (and this one loads theirs).
  void save(tessera::CheckpointWriter& writer) override;
  void load(const tessera::CheckpointReader& reader) override;
  // A new world (elastic runs): setup() on it, then the state from `state`, as load() reads it.
  void reconfigure(std::shared_ptr<tessera::Communicator> new_world,
                   const tessera::CheckpointReader& state) override;
  // Every rank is a replica of its own and reports metrics.
  [[nodiscard]] tessera::DataParallelPlacement data_parallel_placement() const override;
  [[nodiscard]] tessera::MemoryReport memory_report() const override;

 private:
  [[nodiscard]] tessera::LayerHooks hooks();

  tessera::StrategySetup setup_;
  tessera::FlatLayout layout_;
  // The elements of the flat vector the optimizer must not decay (biases, norms, embeddings).
  tessera::DecayExemptions no_decay_;
  // f32, flat, in host memory: parameters, gradients, optimizer state (state_per_param slots).
  tessera::Tensor params_;
  tessera::Tensor grads_;
  tessera::Tensor state_;
  // Views of params_ and grads_, one list per layer, in ParamSpec order.
  std::vector<std::vector<tessera::BufferView>> layer_params_;
  std::vector<std::vector<tessera::BufferView>> layer_grads_;
  // Tied parameters (ParamSpec::tied_to): their users' gradient contributions summed.
  tessera::TiedGradients ties_;
};

}  // namespace my_plugin
