#pragma once
// Model: a sequence of layers plus a loss. Holds no parameter memory (the strategy does).

#include <cstddef>

#include "tessera/plugin/dataset.hpp"
#include "tessera/plugin/layer.hpp"
#include "tessera/plugin/plugin_object.hpp"

namespace tessera {

// What a loss gives for a batch: sums and counts over its target elements (every target that
// is not kIgnoreTarget), so that means are per target whatever splits the batch, and the
// gradient of the mean.
struct LossResult {
  double loss_sum = 0.0;    // summed over the counted targets
  std::size_t targets = 0;  // counted targets
  std::size_t correct = 0;  // counted targets whose arg-max logit is the target
  Tensor grad_logits;       // d(loss_sum / targets)/d(logits); zeros where ignored

  [[nodiscard]] double mean() const noexcept {
    return targets == 0 ? 0.0 : loss_sum / static_cast<double>(targets);
  }
};

// Thread-safety: all methods are const and may be called concurrently.
// Lifetime: layer references stay valid as long as the model lives.
class Model : public PluginObject {
 public:
  // The samples the model takes and the targets its loss reads (see SampleLayout), so the
  // engine can check a data set against the model before training.
  [[nodiscard]] virtual SampleLayout layout() const = 0;
  [[nodiscard]] virtual std::size_t layer_count() const noexcept = 0;
  [[nodiscard]] virtual const Layer& layer(std::size_t index) const = 0;
  // logits: the last layer's output, [n, target_shape..., classes]; targets: [n, target_shape...]
  // as the data set gave them.
  [[nodiscard]] virtual LossResult loss(const Tensor& logits, const Tensor& targets) const = 0;
};

}  // namespace tessera
