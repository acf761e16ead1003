#pragma once
// GradientSynchronizer: averages gradients over a data-parallel group in buckets that start
// while backward still runs (the DDP reducer). The `ddp` strategy drives it from its own
// backward; a host with its own autograd drives it directly (bring-your-own-compute).

#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "tessera/base/device_allocator.hpp"
#include "tessera/base/tensor.hpp"
#include "tessera/plugin/communicator.hpp"
#include "tessera/plugin/optimizer.hpp"
#include "tessera/strategy_kit/weight_decay.hpp"

namespace tessera {

enum class GradientCompression : std::uint8_t { none, bf16 };

// "none" or "bf16"; throws InvalidArgument otherwise.
[[nodiscard]] GradientCompression parse_gradient_compression(const std::string& name);

struct GradientSyncOptions {
  // Buckets fill in reverse registration order (the order backward produces gradients). The
  // first closes at first_bucket_bytes so communication starts early; later ones at
  // bucket_cap_bytes. A gradient larger than the cap gets a bucket of its own.
  std::size_t first_bucket_bytes = std::size_t{1} << 20;
  std::size_t bucket_cap_bytes = std::size_t{25} << 20;
  // bf16 halves the bytes on the wire; gradients, accumulation and the update stay fp32.
  GradientCompression compression = GradientCompression::none;
};

// One bucket of the plan: registered gradients [first, last] (registration indices,
// first <= last), reduced as one all-reduce.
struct GradientBucket {
  std::size_t first = 0;
  std::size_t last = 0;
  std::size_t elements = 0;
  bool in_place = false;  // the gradients are adjacent in memory, so no staging copy
};

// Usage per step: (backward) grad_ready(i) for every registered gradient, in any order, each
// once; then wait(); then optionally clip_grad_norm() and step(). Gradient accumulation: call
// grad_ready only in the last micro-batch's backward, so earlier ones communicate nothing.
//
// Ordering: every rank must register the same gradients (same sizes, same order), so that the
// bucket plan and with it the sequence of collectives is identical everywhere. A bucket's
// all-reduce is issued on the calling thread the moment its last gradient becomes ready, and
// buckets are issued strictly in plan order (a bucket completed early waits for its
// predecessors), because collectives must be issued in the same order on every rank.
//
// Memory: gradient and parameter buffers belong to the caller and must stay valid and
// unmoved while the synchronizer lives. Gradients adjacent in memory (the ddp strategy's flat
// storage) are reduced in place; others go through a staging buffer the synchronizer owns, in
// host memory. The optimizer state comes from the allocator given at construction.
//
// Devices: parameters and gradients live on the allocator's device, the host by default. On
// another device (a GPU) the spans passed to add_parameter hold device pointers, which the
// synchronizer never reads on the host: buckets are all-reduced in place (gradients must be
// adjacent, compression none, else finalize() throws InvalidArgument), the optimizer steps on
// the device, and the norm is computed from a host copy of the gradients, bit for bit the
// host path's.
//
// Thread-safety: none; drive one synchronizer from one thread.
class GradientSynchronizer {
 public:
  // `allocator` holds the optimizer state (null: cpu_allocator()) and says where parameters and
  // gradients live (its device).
  GradientSynchronizer(std::shared_ptr<Communicator> group, GradientSyncOptions options,
                       std::shared_ptr<DeviceAllocator> allocator = nullptr);
  ~GradientSynchronizer();
  GradientSynchronizer(const GradientSynchronizer&) = delete;
  GradientSynchronizer& operator=(const GradientSynchronizer&) = delete;

  // Registers one parameter in forward order and returns its index. `param` may be empty when
  // the caller steps its own optimizer; otherwise it has grad's size. `weight_decay`: whether
  // step() lets the optimizer decay it (ParamSpec::weight_decay). Only before the first
  // grad_ready / finalize.
  std::size_t add_parameter(std::string name, std::span<float> param, std::span<float> grad,
                            bool weight_decay = true);

  // Freezes the bucket plan and allocates staging buffers. Implied by the first grad_ready.
  void finalize();

  // Marks gradient `index` complete for this step. Non-blocking apart from issuing the
  // all-reduce of every bucket that is now complete (in plan order). Throws InvalidArgument
  // if the gradient was already marked in this step.
  void grad_ready(std::size_t index);

  // Blocks until every bucket's all-reduce has finished and its result is back in the
  // caller's gradient buffers; then every registered gradient is the average over the group,
  // bitwise identical on every rank. Throws InvalidArgument naming a gradient never marked
  // ready, and TransportError / Timeout from the group. Resets the step.
  void wait(Duration timeout);

  // The global L2 norm of the registered gradients (after wait()), summed block-wise (see
  // kGradNormBlock). If max_norm > 0, scales every gradient by grad_clip.hpp's
  // clip_coefficient (max_norm / (norm + 1e-6) when below 1). Returns the norm before clipping.
  double clip_grad_norm(double max_norm);

  // Applies `optimizer` to every registered parameter with its gradient, holding the optimizer
  // state itself (zero-initialised on the first call). Parameters adjacent in memory, with
  // gradients adjacent likewise, form one run and one optimizer call, so a single flat buffer
  // gets the canonical slot-major state layout the checkpoint format uses.
  void step(const Optimizer& optimizer, const StepInfo& info);

  // clip_grad_norm(0) then step(), then every registered gradient set to zero (ready for the
  // next step's accumulation), in one pass over cache-sized chunks when the optimizer keeps at
  // most one state slot per element (a chunk's state is then contiguous), else in separate
  // passes. Returns the norm; norm, parameters and state are bitwise those of the two calls.
  double step_unclipped_and_zero(const Optimizer& optimizer, const StepInfo& info);

  // The optimizer state, run by run (each run slot-major over its elements); empty before the
  // first step() unless allocated through optimizer_state_for().
  [[nodiscard]] std::span<float> optimizer_state() const { return state_.as<float>(); }
  // The same wherever it lives (on a device: as<float>() refuses; copy it with its allocator).
  [[nodiscard]] const Tensor& optimizer_state_tensor() const noexcept { return state_; }
  // Allocates (zeroed) state for `optimizer` now, so a checkpoint can be loaded into it.
  // Host memory only; prepare_optimizer_state() does the same wherever the state lives.
  std::span<float> optimizer_state_for(const Optimizer& optimizer);
  const Tensor& prepare_optimizer_state(const Optimizer& optimizer);

  [[nodiscard]] const std::vector<GradientBucket>& buckets() const noexcept { return buckets_; }
  [[nodiscard]] std::size_t parameter_count() const noexcept { return entries_.size(); }
  [[nodiscard]] std::size_t element_count() const noexcept { return elements_; }
  // Staging and compression buffers, in bytes.
  [[nodiscard]] std::size_t buffer_bytes() const noexcept;
  [[nodiscard]] std::size_t optimizer_state_bytes() const noexcept { return state_.bytes(); }

 private:
  struct Entry {
    std::string name;
    std::span<float> param;
    std::span<float> grad;
    std::size_t bucket = 0;
    bool weight_decay = true;
  };
  struct BucketState;

  // Calls visit(first, last, count) for each run of registered parameters whose values and
  // gradients both continue where the previous ended.
  template <class Visit>
  void for_each_run(Visit&& visit) const;
  // The exempt elements of the run of entries [first, last], counted from its start.
  [[nodiscard]] DecayExemptions exemptions_of_run(std::size_t first, std::size_t last) const;
  void issue_ready_buckets();
  void stage_in(std::size_t b);
  void stage_out(std::size_t b);
  double clip_device_grad_norm(double max_norm);
  [[nodiscard]] BufferView device_view(std::span<float> values) const;

  std::shared_ptr<Communicator> group_;
  GradientSyncOptions options_;
  std::vector<Entry> entries_;
  std::vector<GradientBucket> buckets_;
  std::vector<std::unique_ptr<BucketState>> states_;
  std::vector<bool> ready_;
  std::size_t next_to_issue_ = 0;
  std::size_t elements_ = 0;
  bool finalized_ = false;
  std::shared_ptr<DeviceAllocator> allocator_;
  Device device_;                  // allocator_'s: where parameters and gradients live
  std::vector<float> host_grads_;  // the gradients' host copy on a device (the norm)
  Tensor state_;                   // f32, from allocator_
  std::size_t state_per_param_ = 0;
};

// Block size of the gradient-norm reduction. The squared norm is the sum, in block order, of
// per-block sums of squares (each in double, in element order) over the flat gradient in
// registration order. A sharded strategy whose shard boundaries fall on multiples of this
// block size computes bitwise the same norm from its shards.
inline constexpr std::size_t kGradNormBlock = 4096;

// Adds v*v (in double) of every element of `values`, which sits at flat index flat_offset
// onward, into blocks[(flat_offset + i) / kGradNormBlock], growing `blocks` as needed. Call in
// increasing flat order so each block sums in element order.
void accumulate_norm_blocks(std::span<const float> values, std::size_t flat_offset,
                            std::vector<double>& blocks);
// Sums block partials in order.
[[nodiscard]] double sum_norm_blocks(std::span<const double> blocks) noexcept;

}  // namespace tessera
