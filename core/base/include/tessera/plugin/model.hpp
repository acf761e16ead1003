#pragma once
// Model: a sequence of layers plus a loss. Holds no parameter memory (the strategy does).

#include <cstddef>

#include "tessera/plugin/layer.hpp"
#include "tessera/plugin/plugin_object.hpp"

namespace tessera {

struct LossResult {
  double loss = 0.0;        // mean over the batch
  std::size_t correct = 0;  // samples whose arg-max matches the target
  Tensor grad_logits;       // d(loss)/d(logits), scaled for the mean
};

// Thread-safety: all methods are const and may be called concurrently.
// Lifetime: layer references stay valid as long as the model lives.
class Model : public PluginObject {
 public:
  // Shape of one sample (without the batch dimension) and the number of classes of the loss,
  // so the engine can check a dataset against the model before training.
  [[nodiscard]] virtual Shape input_shape() const = 0;
  [[nodiscard]] virtual std::size_t num_classes() const noexcept = 0;
  [[nodiscard]] virtual std::size_t layer_count() const noexcept = 0;
  [[nodiscard]] virtual const Layer& layer(std::size_t index) const = 0;
  // targets: i64 class indices, one per row of logits.
  [[nodiscard]] virtual LossResult loss(const Tensor& logits, const Tensor& targets) const = 0;
};

}  // namespace tessera
