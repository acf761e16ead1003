#pragma once
// Local SGD: every rank trains its own replica with the optimizer, without communicating, and
// every `sync_every` steps the replicas' parameters are averaged with one all-reduce. Fewer,
// larger messages than DDP's per-step gradient all-reduce, at the price of replicas that drift
// apart for up to sync_every - 1 steps (Stich, "Local SGD Converges Fast and Communicates
// Little", ICLR 2019).

#include <cstdint>
#include <vector>

#include "tessera/plugin/options.hpp"
#include "tessera/plugin/strategy.hpp"
#include "tessera/strategy_kit/flat_state.hpp"
#include "tessera/strategy_kit/layer_runner.hpp"
#include "tessera/strategy_kit/micro_batches.hpp"
#include "tessera/strategy_kit/tied_gradients.hpp"
#include "tessera/strategy_kit/weight_decay.hpp"

namespace acme {

class LocalSgdStrategy final : public tessera::Strategy {
 public:
  // Options of the [strategy.local_sgd] section (see README.md).
  explicit LocalSgdStrategy(const tessera::Options& options);

  void setup(const tessera::StrategySetup& setup) override;
  // Forward, backward and an optimizer step on this rank's batch alone; on every
  // sync_every-th step the parameters are then averaged over all ranks. The loss and grad_norm
  // returned are this rank's own: a Local SGD step does not communicate.
  tessera::StepStats train_step(const tessera::Batch& batch,
                                const tessera::StepInfo& info) override;
  // Not collective (the Trainer skips ranks with an empty share): each rank evaluates its own
  // replica, identical to the others right after an averaging step.
  tessera::StepStats evaluate(const tessera::Batch& batch) override;
  // Averages the parameters first (collective), so that the checkpoint holds the model every
  // rank continues from; rank 0 then writes parameters and its optimizer state.
  void save(tessera::CheckpointWriter& writer) override;
  void load(const tessera::CheckpointReader& reader) override;
  // setup() on the new world, then load(state): every replica continues from the averaged
  // parameters and rank 0's optimizer state, as after loading a checkpoint.
  void reconfigure(std::shared_ptr<tessera::Communicator> new_world,
                   const tessera::CheckpointReader& state) override;
  // Every rank is a replica of its own and reports metrics.
  [[nodiscard]] tessera::DataParallelPlacement data_parallel_placement() const override;
  [[nodiscard]] tessera::MemoryReport memory_report() const override;

 private:
  // Forward and backward of one micro-batch, gradients added into grads_ with the given weight,
  // the layers drawing from `draw`. Returns the summed loss and the correct count.
  tessera::PassTotals forward_backward(const tessera::Tensor& inputs,
                                       const tessera::Tensor& targets, float weight,
                                       const tessera::TrainingDraw& draw);
  tessera::Tensor forward(const tessera::Tensor& inputs);
  // The layer runner's view of params_ and grads_.
  [[nodiscard]] tessera::LayerHooks hooks();
  void average(const tessera::Tensor& values);

  std::int64_t sync_every_;
  tessera::StrategySetup setup_;
  tessera::FlatLayout layout_;
  // The elements of the flat vector the optimizer must not decay (biases, norms, embeddings).
  tessera::DecayExemptions no_decay_;
  // f32, flat, from the setup's allocator (tessera/strategy_kit/device_memory.hpp).
  tessera::Tensor params_;
  tessera::Tensor grads_;
  tessera::Tensor state_;
  // Views of params_ and grads_, one list per layer, in ParamSpec order.
  std::vector<std::vector<tessera::BufferView>> layer_params_;
  std::vector<std::vector<tessera::BufferView>> layer_grads_;
  // Tied parameters (ParamSpec::tied_to): their users' gradient contributions summed.
  tessera::TiedGradients ties_;
  std::int64_t steps_since_average_ = 0;
};

}  // namespace acme
