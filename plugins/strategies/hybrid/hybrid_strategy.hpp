#pragma once
// hybrid: Megatron-style 3-D parallelism. The world is a mesh of tensor x data x pipeline ranks
// (mesh.hpp): the model's layers are cut into pipeline stages (model_split.hpp), Linear pairs
// inside a stage run column- then row-parallel over the tensor group, micro-batches flow through
// the stages under a schedule (pipeline_schedule.hpp) with send/recv over the pipeline group,
// and gradients are averaged over the data group in buckets that start during the last
// micro-batch's backward. Each rank holds only its stage's layers, and of split layers only its
// 1/tp slice: parameters, gradients and optimizer state alike.

#include <chrono>
#include <cstddef>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "mesh.hpp"
#include "model_split.hpp"
#include "pipeline_schedule.hpp"
#include "tessera/base/tensor.hpp"
#include "tessera/plugin/options.hpp"
#include "tessera/plugin/strategy.hpp"
#include "tessera/strategy_kit/flat_state.hpp"
#include "tessera/strategy_kit/gradient_sync.hpp"
#include "tessera/strategy_kit/layer_runner.hpp"
#include "tessera/strategy_kit/micro_batches.hpp"
#include "tessera/strategy_kit/tensor_parallel.hpp"
#include "tessera/strategy_kit/tied_gradients.hpp"
#include "tessera/strategy_kit/weight_decay.hpp"

namespace tessera::hybrid {

// Defaults are the plugin schema's (plugin.cpp).
struct HybridConfig {
  int tensor_parallel = 1;
  int pipeline_parallel = 1;
  // Micro-batches per step through the pipeline; 0 takes StrategySetup::micro_batches ([train]
  // micro_batches).
  std::size_t micro_batches = 0;
  ScheduleKind schedule = ScheduleKind::one_f_one_b;
  PartitionKind partition = PartitionKind::uniform;
  // recompute = full: a stage keeps only each micro-batch's input between its forward and
  // backward, and runs the forward again just before the backward (activation checkpointing
  // per stage): activation memory of one micro-batch's layers, for a second forward. A
  // micro-batch whose backward is the stage's next compute (the last stage under 1F1B) keeps
  // its activations: recomputing them would save nothing.
  bool recompute = false;
  // data_parallel_sharding = zero1: the optimizer state is sharded over the data group (each
  // data rank updates 1/dp of this rank's parameters and the group all-gathers them).
  bool zero1 = false;
  GradientSyncOptions sync;  // the data group's gradient buckets
};

// Where a stage's time went, summed over the steps since construction or the last reset.
struct PipelineTiming {
  std::size_t steps = 0;           // timed
  std::size_t untimed_steps = 0;   // the first step after setup: it pays one-time costs (first
                                   // touches of every buffer), not the schedule's
  double recv_wait_seconds = 0.0;  // blocked waiting for an activation or a gradient to arrive
  double pipeline_seconds = 0.0;   // running the schedule: first action to the last send done
  std::size_t stages = 1;
  std::size_t micro_batches = 1;  // of the last step

  // recv_wait_seconds / pipeline_seconds: the measured bubble (0 with no step).
  [[nodiscard]] double bubble() const noexcept {
    return pipeline_seconds > 0.0 ? recv_wait_seconds / pipeline_seconds : 0.0;
  }
  [[nodiscard]] double theoretical() const { return theoretical_bubble(stages, micro_batches); }
};

class HybridStrategy final : public Strategy {
 public:
  explicit HybridStrategy(const HybridConfig& config);
  // From the plugin's options. Throws ConfigError for a bad schedule, partition or recompute
  // name.
  explicit HybridStrategy(const Options& options);
  ~HybridStrategy() override;

  // Throws ConfigError (naming the [strategy.hybrid] options and the world size) when the mesh
  // does not fit the world or the model (see Mesh, partition_layers, tensor_parallel_roles),
  // before any communication, so every rank refuses alike.
  void setup(const StrategySetup& setup) override;
  StepStats train_step(const Batch& batch, const StepInfo& info) override;
  // The first evaluate() after training steps also prints the pipeline bubble (report_bubble).
  StepStats evaluate(const Batch& batch) override;
  void save(CheckpointWriter& writer) override;
  void load(const CheckpointReader& reader) override;
  void reconfigure(std::shared_ptr<Communicator> new_world, const CheckpointReader& state) override;
  // The mesh's data-parallel size; throws the ConfigError setup() would (a world the mesh does
  // not divide, a tensor_parallel that does not divide a split layer, more stages than layers).
  [[nodiscard]] int plan_data_parallel_size(const Model& model, int world_size) const override;
  [[nodiscard]] DataParallelPlacement data_parallel_placement() const override;
  [[nodiscard]] MemoryReport memory_report() const override;

  // This rank's place in the mesh and its stage's layers; valid after setup().
  [[nodiscard]] const MeshCoordinates& coordinates() const;
  [[nodiscard]] StageRange stage() const noexcept { return stage_; }
  [[nodiscard]] const std::vector<TensorParallelRole>& tensor_roles() const noexcept {
    return roles_;
  }
  // The pipeline timing of this rank since setup() (or the last take_pipeline_timing()); local.
  [[nodiscard]] const PipelineTiming& pipeline_timing() const noexcept { return timing_; }
  // Returns the timing and starts a new measurement.
  PipelineTiming take_pipeline_timing();

  // One parameter as this rank holds it: its model layer, its spec (a slice's for a split
  // layer) and its values (a view of the strategy's storage, valid until the next step,
  // load() or reconfigure()).
  struct HeldParameter {
    std::size_t layer = 0;
    ParamSpec spec;
    std::span<const float> values;
  };
  // This rank's parameters in model order; local. For tests and embedders that inspect them.
  [[nodiscard]] std::vector<HeldParameter> held_parameters() const;

  // The whole model's parameters (FlatLayout order) assembled from every rank's slices, on
  // every rank. Collective over the world (an exchange of the whole state through save()); for
  // tests and export, not for a training loop.
  [[nodiscard]] std::vector<float> gather_parameters();

 private:
  // One parameter (or slice) this rank holds, at `offset` in params_ / grads_.
  struct LocalParam {
    std::size_t layer = 0;        // model layer index (of the owner, for a tied parameter)
    std::size_t model_index = 0;  // index in layout_.params (init, checkpoints)
    ParamSpec spec;               // the slice's spec for a split layer
    std::size_t offset = 0;
    std::size_t count = 0;
    // A tied parameter whose owner is on an earlier stage: this stage's copy, which the
    // owner's stage writes to checkpoints and counts in the norm.
    bool copy = false;
  };
  // A parameter used by layers of several pipeline stages (a tie across stages), as this rank
  // holds it.
  struct StageTie {
    std::size_t offset = 0;  // in params_ / grads_
    std::size_t count = 0;
    std::vector<int> stages;  // pipeline ranks holding it, in order, this one among them
    std::uint32_t tag = 0;    // of its pipeline messages
  };
  // The views the layer runner gets for one layer of this stage.
  struct StageLayer {
    std::vector<BufferView> params;
    std::vector<BufferView> grads;
    std::vector<std::size_t> sync_indices;
  };
  struct MicroBatchPlan;

  void reset();
  [[nodiscard]] LayerHooks hooks(bool last_micro_batch);
  // The ties across stages this rank takes part in (tied_stages.cpp).
  void plan_ties(const std::vector<StageRange>& stages);
  // Each tie's gradient, summed over the stages holding it in stage order, on each of them.
  // Collective over those stages of the pipeline group.
  void sum_tied_gradients();
  [[nodiscard]] LayerRange range() const;
  // The model's loss on the last stage's output: over this rank's vocabulary slice when the head
  // splits by vocabulary (collective over the tensor group), else Model::loss.
  [[nodiscard]] LossResult loss_of(const Tensor& logits, const Tensor& targets) const;
  // The shape of `rows` samples entering model layer `layer` on this tensor rank.
  [[nodiscard]] Shape shape_before(std::size_t layer, std::size_t rows) const;
  // Sum of squares of the whole model's gradients, every parameter counted once: complete on
  // the last stage, which adds its part last; earlier stages return their partial sums.
  // Collective over the tensor and pipeline groups.
  [[nodiscard]] double last_stage_sum_of_squares();
  // Prints measured and theoretical bubble from world rank 0 (collective over the world).
  void report_bubble();
  // Whether the optimizer state is sharded over the data group, and where this rank's shard
  // starts in params_.
  [[nodiscard]] bool sharded() const noexcept;
  [[nodiscard]] std::size_t shard_begin() const noexcept;

  HybridConfig config_;
  StrategySetup setup_;
  std::optional<Mesh> mesh_;
  std::unique_ptr<MeshGroups> groups_;
  FlatLayout layout_;  // the whole model's
  StageRange stage_;
  std::vector<TensorParallelRole> roles_;
  std::unique_ptr<TensorParallelPlan> plan_;
  // Set when the model's head splits by vocabulary: this tensor rank's classes, reduced over
  // plan_, and the model's loss over them.
  std::optional<VocabularySlice> vocabulary_;
  const VocabularyParallelModel* vocabulary_model_ = nullptr;
  std::vector<std::unique_ptr<Layer>> owned_;  // the sliced layers
  std::vector<const Layer*> layers_;           // every model layer, sliced ones in place
  std::vector<LocalParam> params_of_stage_;
  std::vector<StageLayer> stage_layers_;
  // params_ and grads_ hold local_count_ elements, padded to data_size * shard_size_ with
  // zeros when the optimizer state is sharded (zero1); state_ is slot-major over this rank's
  // shard [data rank * shard_size_, + shard_size_) (the whole when not sharded).
  Tensor params_;
  Tensor grads_;
  Tensor state_;
  std::size_t local_count_ = 0;
  std::size_t own_count_ = 0;  // the first elements: the stage's own parameters (copies follow)
  std::vector<StageTie> stage_ties_;
  TiedGradients ties_;  // ties inside the stage
  std::size_t shard_size_ = 0;
  std::vector<ElementRange> shard_exemptions_;  // of this rank's shard: weight decay skips them
  std::unique_ptr<GradientSynchronizer> sync_;
  PipelineTiming timing_;
  bool first_step_done_ = false;  // since setup: the first step is not timed (PipelineTiming)
  std::size_t steps_since_report_ = 0;
};

}  // namespace tessera::hybrid
