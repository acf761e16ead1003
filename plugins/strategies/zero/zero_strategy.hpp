#pragma once
// ZeRO stages 1 and 2 (Rajbhandari et al.): every rank keeps the full parameters for compute,
// but only its shard of the optimizer state (stage 1) and of the gradients too (stage 2). The
// flat padded parameter vector is cut as ShardLayout describes: per bucket, one piece per
// rank. After the reduction each rank updates its pieces and the updated parameters are
// all-gathered, bucket by bucket, while the next forward starts.
//
// Parameters come out bitwise identical to ddp's: the reduction is the same element-wise
// kernel in rank order, the optimizer is element-wise, and the gradient norm is summed in the
// same fixed blocks (piece boundaries fall on kGradNormBlock multiples).

#include <array>
#include <memory>
#include <span>
#include <vector>

#include "tessera/plugin/options.hpp"
#include "tessera/plugin/strategy.hpp"
#include "tessera/strategy_kit/flat_state.hpp"
#include "tessera/strategy_kit/layer_runner.hpp"
#include "tessera/strategy_kit/micro_batches.hpp"
#include "tessera/strategy_kit/shard_layout.hpp"
#include "tessera/strategy_kit/tied_gradients.hpp"
#include "tessera/strategy_kit/weight_decay.hpp"

namespace tessera::zero {

enum class ZeroStage : std::uint8_t { one = 1, two = 2 };

struct ZeroConfig {
  ZeroStage stage = ZeroStage::two;
  // Buckets, as in ddp: the first small so communication starts early in backward. Rounded up
  // to a multiple of world * kGradNormBlock elements.
  std::size_t first_bucket_bytes = std::size_t{1} << 20;
  std::size_t bucket_cap_bytes = std::size_t{4} << 20;
  // Stage 2 gradient staging windows (see below): 2 overlaps a layer's reduce-scatters with
  // the next layer's backward; 1 halves that memory and waits instead.
  std::size_t staging_windows = 2;
};

// Gradient memory of stage 2 during backward: a layer's backward needs its whole gradient as
// one contiguous view, and a bucket's reduce-scatter needs the bucket contiguous. So each
// layer with parameters gets a staging window covering the buckets it touches; two windows
// alternate (staging_windows = 2), so one layer's buckets are reduced while the next layer
// computes. The part of a
// bucket shared with the layer below is carried into the next window. Between steps only the
// gradient shard and the two windows exist; memory_report() counts the windows as buffers.
// With micro_batches > 1 the gradients must accumulate over micro-batches before any
// reduction, so that step alone holds a full (padded) gradient buffer.
class ZeroStrategy : public Strategy {
 public:
  explicit ZeroStrategy(const ZeroConfig& config);
  // From the plugin's options (bucket_cap, first_bucket).
  ZeroStrategy(const Options& options, ZeroStage stage);
  ~ZeroStrategy() override;
  ZeroStrategy(const ZeroStrategy&) = delete;
  ZeroStrategy& operator=(const ZeroStrategy&) = delete;

  void setup(const StrategySetup& setup) override;
  StepStats train_step(const Batch& batch, const StepInfo& info) override;
  StepStats evaluate(const Batch& batch) override;
  void save(CheckpointWriter& writer) override;
  void load(const CheckpointReader& reader) override;
  void reconfigure(std::shared_ptr<Communicator> new_world, const CheckpointReader& state) override;
  [[nodiscard]] DataParallelPlacement data_parallel_placement() const override;
  [[nodiscard]] MemoryReport memory_report() const override;

  // The full flat parameters (FlatLayout order, then padding) once pending gathers land. On a
  // GPU, a host copy made by this call (valid until the next setup).
  [[nodiscard]] std::span<const float> parameters();
  // Collective: the whole optimizer state, slot-major over layout total (the format of a ddp
  // checkpoint's single shard), gathered from every rank's shard. For tests and export.
  [[nodiscard]] std::vector<float> consolidated_optimizer_state();
  [[nodiscard]] const ShardLayout& shard_layout() const noexcept { return shards_; }
  [[nodiscard]] const FlatLayout& flat_layout() const noexcept { return layout_; }

 private:
  struct LayerSlice {
    std::vector<BufferView> params;
    std::vector<std::size_t> offsets;  // canonical offset of each parameter
    std::vector<std::size_t> counts;
    std::vector<bool> borrowed;  // a tied parameter of an earlier layer (ParamSpec::tied_to)
    std::size_t begin = 0;       // canonical range of the layer's own parameters
    std::size_t end = 0;
  };
  // Where this step's gradients live: grads_ (stage 1), accumulate_ (stage 2, several
  // micro-batches) or the staging windows (stage 2, one micro-batch).
  enum class GradientHome : std::uint8_t { full, accumulate, windows };

  Tensor forward(const Tensor& inputs);
  // The layer runner's view of the flat storage; buckets reduced as they fill when `last`.
  [[nodiscard]] LayerHooks hooks(bool last);
  PassTotals forward_backward(const Tensor& inputs, const Tensor& targets, float gradient_weight,
                              bool last, const TrainingDraw& draw);
  std::vector<BufferView> gradient_views(std::size_t layer);
  float* prepare_window(const LayerSlice& slice);
  // dst = src, ranges of this strategy's memory that may overlap (one staging window).
  void move_values(BufferView dst, BufferView src) const;
  void issue_buckets_down_to(std::size_t begin);
  void wait_reductions();
  double clip_shard_gradients();
  void gather_parameters();
  void wait_gathers_below(std::size_t end);
  // Where a piece's gradient starts in grads_ (its shard offset at stage 2).
  [[nodiscard]] std::size_t gradient_offset(const ShardPiece& piece) const;
  [[nodiscard]] BufferView piece_gradient(const ShardPiece& piece) const;
  [[nodiscard]] BufferView piece_state(const ShardPiece& piece) const;
  [[nodiscard]] BufferView piece_params(const ShardPiece& piece) const;
  // `count` floats at `values` in this strategy's memory (the host's or a GPU's).
  [[nodiscard]] BufferView on_device(float* values, std::size_t count) const;
  [[nodiscard]] std::size_t state_slots() const;
  [[nodiscard]] bool stage_two() const noexcept { return config_.stage == ZeroStage::two; }

  ZeroConfig config_;
  StrategySetup setup_;
  FlatLayout layout_;
  ShardLayout shards_;
  std::vector<ShardPiece> my_pieces_;
  // Per piece of my_pieces_: the elements weight decay skips, counted from the piece's start.
  std::vector<std::vector<ElementRange>> piece_exemptions_;
  std::vector<LayerSlice> layers_;
  TiedGradients ties_;
  // All f32, from the setup's allocator: host memory, or a GPU's ([runtime] device = cuda)
  // where every computation on them runs there and norms and checkpoints use host copies.
  std::shared_ptr<DeviceAllocator> allocator_;
  Tensor params_;       // full, padded
  Tensor grads_;        // stage 1: full, padded; stage 2: this rank's shard
  Tensor state_;        // shard, piece after piece, slot-major within a piece
  Tensor accumulate_;   // stage 2 with micro-batches, during a step only
  Tensor host_params_;  // parameters()'s host copy, on a GPU only

  struct Window {
    Tensor values;
    std::size_t begin = 0;  // canonical offset of values[0]
    std::vector<std::shared_ptr<Work>> reductions;
  };
  std::array<Window, 2> windows_;
  std::size_t current_window_ = 0;
  bool window_open_ = false;  // a window already holds this step's gradients

  GradientHome home_ = GradientHome::full;
  std::size_t next_bucket_ = 0;                    // next bucket to reduce, in backward order
  std::vector<std::shared_ptr<Work>> reductions_;  // stage 1 and accumulation
  std::vector<std::shared_ptr<Work>> gathers_;     // per bucket, in flight after a step
};

}  // namespace tessera::zero
