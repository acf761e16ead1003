#pragma once
// DDP: every rank holds the full parameters, gradients and optimizer state in flat fp32
// storage (from StrategySetup::allocator) and applies the same update, with gradients averaged in
// buckets that are all-reduced while backward still runs. On a GPU (an allocator of cuda:N)
// the storage, the model's computation and the update are there; the batch's inputs are copied
// to it, and checkpoints go through host copies.

#include <memory>
#include <span>
#include <vector>

#include "tessera/plugin/options.hpp"
#include "tessera/plugin/strategy.hpp"
#include "tessera/strategy_kit/flat_state.hpp"
#include "tessera/strategy_kit/gradient_sync.hpp"
#include "tessera/strategy_kit/layer_runner.hpp"
#include "tessera/strategy_kit/micro_batches.hpp"
#include "tessera/strategy_kit/tied_gradients.hpp"

namespace tessera::ddp {

struct DdpConfig {
  GradientSyncOptions sync;
};

class DdpStrategy final : public Strategy {
 public:
  explicit DdpStrategy(const DdpConfig& config);
  // From the plugin's options (bucket_cap, first_bucket, compression).
  explicit DdpStrategy(const Options& options);

  void setup(const StrategySetup& setup) override;
  StepStats train_step(const Batch& batch, const StepInfo& info) override;
  StepStats evaluate(const Batch& batch) override;
  void save(CheckpointWriter& writer) override;
  void load(const CheckpointReader& reader) override;
  void reconfigure(std::shared_ptr<Communicator> new_world, const CheckpointReader& state) override;
  [[nodiscard]] DataParallelPlacement data_parallel_placement() const override;
  [[nodiscard]] MemoryReport memory_report() const override;

  // The flat parameters (FlatLayout order), for tests and embedders that inspect them. Host
  // memory only (InvalidArgument on a device); host_parameters() copies from anywhere.
  [[nodiscard]] std::span<const float> parameters() const { return params_.as<float>(); }
  [[nodiscard]] std::vector<float> host_parameters() const;
  [[nodiscard]] const GradientSynchronizer& synchronizer() const { return *sync_; }

 private:
  struct LayerViews {
    std::vector<BufferView> params;
    std::vector<BufferView> grads;
    std::vector<std::size_t> sync_indices;
  };

  // Forward and backward of one micro-batch, gradients added into grads_; marks the
  // gradients ready (starting their buckets' all-reduce) when `last` is true. Returns the
  // micro-batch's summed loss (mean * rows) and correct count.
  PassTotals forward_backward(const Tensor& inputs, const Tensor& targets, float gradient_weight,
                              bool last, const TrainingDraw& draw);
  Tensor forward(const Tensor& inputs);
  // The layer runner's view of this rank's flat storage; gradients marked ready when `last`.
  [[nodiscard]] LayerHooks hooks(bool last);

  DdpConfig config_;
  StrategySetup setup_;
  std::shared_ptr<DeviceAllocator> memory_;  // the setup's allocator (the host's if none)
  FlatLayout layout_;
  Tensor params_;  // f32, flat, from the setup's allocator
  Tensor grads_;
  bool grads_zero_ = false;         // the last step left grads_ zeroed, so the next need not
  std::vector<LayerViews> layers_;  // a tied parameter's views are its owner's
  TiedGradients ties_;
  std::unique_ptr<GradientSynchronizer> sync_;
};

}  // namespace tessera::ddp
