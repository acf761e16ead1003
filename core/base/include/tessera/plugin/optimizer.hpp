#pragma once
// Optimizer: an element-wise update over flat fp32 buffers, so that any strategy can shard it.

#include <cstddef>
#include <cstdint>
#include <span>

#include "tessera/base/buffer_view.hpp"
#include "tessera/plugin/plugin_object.hpp"

namespace tessera {

// Elements [begin, end) of one step's views.
struct ElementRange {
  std::size_t begin = 0;
  std::size_t end = 0;
  friend bool operator==(const ElementRange&, const ElementRange&) = default;
};

struct StepInfo {
  std::int64_t step = 0;       // 1 for the first update
  float learning_rate = 0.0F;  // after the engine's schedule
  // Samples of this step over all ranks (EpochShard::global_batch_size), so a strategy can
  // weight a rank's share when the last batch of an epoch is uneven; 0 means every rank has
  // as many samples as this one. Optimizers ignore it.
  std::size_t global_batch_size = 0;
  // Rows of this step's global batch dealt to the data-parallel replicas before this rank's
  // (EpochShard::batch_offset): where its share starts. Layers that draw per sample (dropout)
  // key on it, so that any world size draws the masks one rank would; a host that deals its
  // own batches sets it, or every replica draws replica 0's masks. Optimizers ignore it.
  std::size_t batch_offset = 0;
  // The elements of this call's views that weight decay skips (parameters whose ParamSpec says
  // weight_decay = false), as ranges sorted, disjoint and non-empty, within [0, params.count).
  // Empty: every element decays. The caller owns the memory for the duration of step().
  std::span<const ElementRange> no_weight_decay{};
};

// Element-wise contract: the update of element i reads only params[i], grads[i], its own
// state slots and whether info.no_weight_decay holds i, so a strategy may call step() on any
// partition of the parameters (a ZeRO shard) and get exactly the bits a whole-model call would
// give. An exempt element updates exactly as with weight_decay = 0.
// Thread-safety: step() may run concurrently on disjoint spans.
class Optimizer : public PluginObject {
 public:
  // fp32 state values per parameter element (SGD with momentum: 1, Adam: 2).
  [[nodiscard]] virtual std::size_t state_per_param() const noexcept = 0;

  // Whether step() can update buffers on `device`: the host always; another device only where
  // the optimizer has an implementation for it. A strategy asks before it places state there.
  [[nodiscard]] virtual bool runs_on(Device device) const noexcept {
    return device == Device::cpu();
  }

  // Updates params in place. All three views are f32 and on one device the optimizer runs_on;
  // grads has params.count elements, state state_per_param() consecutive blocks of params.count
  // (slot-major), zero before the first step. The caller owns the memory. Device work is
  // ordered on the device's default stream and complete when step() returns. Throws
  // InvalidArgument for views that break this, and for no_weight_decay ranges that are not
  // sorted, disjoint, non-empty and inside the views.
  virtual void step(BufferView params, BufferView grads, BufferView state,
                    const StepInfo& info) const = 0;

  // The same over host memory.
  void step(std::span<float> params, std::span<const float> grads, std::span<float> state,
            const StepInfo& info) const {
    step(view_of(params), view_of(grads), view_of(state), info);
  }
};

}  // namespace tessera
