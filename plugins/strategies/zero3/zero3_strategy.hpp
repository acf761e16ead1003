#pragma once
// ZeRO-3 / FSDP: parameters, gradients and optimizer state all sharded. The model is cut into
// units; a unit's parameters are all-gathered just before its forward and its backward (the
// next unit's gather prefetched) and released right after; its gradient is reduce-scattered
// the moment its backward ends.

#include <cstddef>
#include <memory>
#include <span>
#include <vector>

#include "gather_pool.hpp"
#include "sharded_grad_norm.hpp"
#include "tessera/plugin/options.hpp"
#include "tessera/plugin/strategy.hpp"
#include "tessera/strategy_kit/flat_state.hpp"
#include "tessera/strategy_kit/layer_runner.hpp"
#include "tessera/strategy_kit/micro_batches.hpp"
#include "tessera/strategy_kit/tied_gradients.hpp"
#include "tessera/strategy_kit/weight_decay.hpp"
#include "unit_plan.hpp"

namespace tessera::zero3 {

struct Zero3Config {
  // true: free a unit's gathered parameters after its forward and gather them again for its
  // backward (ZeRO-3, FSDP FULL_SHARD); false: keep them until its backward (SHARD_GRAD_OP).
  bool reshard_after_forward = true;
  std::size_t prefetch = 1;      // units gathered ahead of the one computing; 0: none
  std::size_t unit_size = 1;     // layers with parameters per unit
  std::size_t max_inflight = 2;  // parameter gathers issued and not yet waited for
};

class Zero3Strategy final : public Strategy {
 public:
  explicit Zero3Strategy(const Zero3Config& config);
  // From the plugin's options (reshard_after_forward, prefetch, unit_size, max_inflight).
  explicit Zero3Strategy(const Options& options);
  ~Zero3Strategy() override;
  Zero3Strategy(const Zero3Strategy&) = delete;
  Zero3Strategy& operator=(const Zero3Strategy&) = delete;

  void setup(const StrategySetup& setup) override;
  StepStats train_step(const Batch& batch, const StepInfo& info) override;
  StepStats evaluate(const Batch& batch) override;
  void save(CheckpointWriter& writer) override;
  void load(const CheckpointReader& reader) override;
  void reconfigure(std::shared_ptr<Communicator> new_world, const CheckpointReader& state) override;
  [[nodiscard]] DataParallelPlacement data_parallel_placement() const override;
  [[nodiscard]] MemoryReport memory_report() const override;

  // Collective: the full flat parameters (FlatLayout order), gathered unit by unit, for tests
  // and exports. Allocates the whole model; not for the training loop.
  [[nodiscard]] std::vector<float> gather_parameters();
  // This rank's shard of the parameters, in host memory only (InvalidArgument on a GPU).
  [[nodiscard]] std::span<const float> parameter_shards() const { return params_.as<float>(); }
  [[nodiscard]] const UnitPlan& plan() const noexcept { return plan_; }
  [[nodiscard]] std::size_t pool_buffers() const noexcept {
    return pool_ ? pool_->buffer_count() : 0;
  }

 private:
  // A unit's gathered parameters: the pool buffer and, until waited for, the gather filling it.
  struct Gathered {
    std::size_t buffer = 0;
    bool held = false;
    std::shared_ptr<Work> work;
  };

  // Waits for every gather and reduce-scatter still in flight, dropping their errors: their
  // buffers are about to be freed or reused, and the caller has nothing to report them to.
  void drain_in_flight() noexcept;
  void request_gather(std::size_t unit);
  // Gathers ahead of `unit` in the direction of travel (+1 forward, -1 backward).
  void prefetch_from(std::size_t unit, int direction);
  float* wait_gathered(std::size_t unit);
  void release_gathered(std::size_t unit);
  [[nodiscard]] std::size_t inflight_gathers() const;

  // Layer `layer`'s views into `base`, the unit's gathered buffer; empty for tied parameters.
  [[nodiscard]] std::vector<BufferView> views(std::size_t layer, const Unit& unit,
                                              float* base) const;
  // Fills the tied parameters' views of `layer` with their owners' units, gathering those the
  // layer needs (held until return_tied(layer), after its compute).
  void lend_tied(std::size_t layer, std::vector<BufferView>& views);
  void return_tied(std::size_t layer);
  // The unit whose backward is running: where its full gradient accumulates.
  struct UnitGradient {
    std::size_t buffer = 0;  // pool buffer, without micro-batch accumulation
    float* base = nullptr;
  };
  [[nodiscard]] std::size_t unit_of(std::size_t layer) const;
  // The layer runner's view of the units: gathered before their first layer, released after
  // their last (kept for backward when `for_backward` says so); on the `last` micro-batch each
  // unit's gradient is reduce-scattered into the gradient shards as soon as it is complete.
  // An empty batch computes nothing but still issues every gather, as all ranks must.
  [[nodiscard]] LayerHooks hooks(bool for_backward, bool last, UnitGradient& gradient);
  PassTotals forward_backward(const Tensor& inputs, const Tensor& targets, float gradient_weight,
                              bool last, const TrainingDraw& draw);

  Zero3Config config_;
  StrategySetup setup_;
  FlatLayout layout_;
  UnitPlan plan_;
  std::vector<ParamSpec> specs_;                // FlatLayout order (owners' specs)
  std::vector<std::size_t> param_unit_;         // per FlatLayout index: its unit
  std::vector<std::vector<std::size_t>> lent_;  // per layer: units gathered for its ties
  TiedGradients ties_;
  // f32, from the setup's allocator, as are the pool's buffers and accumulated_.
  std::shared_ptr<DeviceAllocator> allocator_;
  Tensor params_;  // this rank's shards, UnitPlan layout
  Tensor grads_;
  Tensor state_;                                // slot-major over params_
  std::vector<ElementRange> shard_exemptions_;  // of params_: the elements weight decay skips
  std::unique_ptr<GatherPool> pool_;
  std::unique_ptr<ShardedGradNorm> norm_;
  std::vector<Gathered> gathered_;               // per unit
  std::vector<Tensor> accumulated_;              // per unit full gradients across micro-batches
  std::vector<std::shared_ptr<Work>> scatters_;  // this step's reduce-scatters
};

}  // namespace tessera::zero3
