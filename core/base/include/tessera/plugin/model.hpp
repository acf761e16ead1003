#pragma once
// Model: a sequence of layers plus a loss. Holds no parameter memory (the strategy does). A
// model whose head splits by vocabulary also derives from VocabularyParallelModel.

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

// The reductions over a tensor group that a loss over a vocabulary slice needs (ABI 3.1; the
// kit implements them over the group's communicator: strategy_kit/tensor_parallel.hpp). Each
// replaces `values` (f32 or f64, host memory) by its element-wise sum or maximum over the group,
// in place, and blocks until done. Every rank of the group calls it at the same point with the
// same shape (a collective), and all get the same bits. Errors: TransportError and Timeout from
// the group.
class TensorGroupReductions {
 public:
  virtual ~TensorGroupReductions() = default;
  virtual void sum(Tensor& values) const = 0;
  virtual void max(Tensor& values) const = 0;
};

// Where the logits of a head split by vocabulary (TensorParallelRole::vocabulary) lie: the last
// dimension of this rank's logits holds classes [begin, end) of `classes`, the other ranks of
// `group` the rest (TensorSlice::range_of of the vocabulary). Not owned; valid for the call.
struct VocabularySlice {
  std::size_t begin = 0;
  std::size_t end = 0;
  std::size_t classes = 0;
  const TensorGroupReductions* group = nullptr;

  [[nodiscard]] std::size_t size() const noexcept { return end - begin; }
};

// ABI 3.1. A model whose output head may split by vocabulary over a tensor group also derives
// from this class; deriving is the model's opt-in to TensorParallelRole::vocabulary (a strategy
// asks no layer of another model for that role, so models built for ABI 3.0 run as they did).
// When the model's last layer is split so, the strategy calls loss_over_vocabulary_slice on each
// tensor rank's slice of the logits instead of Model::loss. Its type information lives in
// libtessera (the out-of-line destructor), so a strategy's dynamic_cast finds it in a plugin
// built with hidden visibility.
class __attribute__((visibility("default"))) VocabularyParallelModel {
 public:
  virtual ~VocabularyParallelModel();
  // What Model::loss gives for the whole logits, from this rank's slice of them ([..., classes
  // slice.begin .. slice.end - 1]): loss_sum, targets and correct (arg-max over the whole
  // vocabulary, its first index on a tie) are the same on every rank of the group, grad_logits is
  // the gradient of this rank's slice only. Collective over slice.group: every rank of it calls
  // this for the same targets, also when none counts. Errors: Model::loss's, and TransportError
  // and Timeout from the group.
  [[nodiscard]] virtual LossResult loss_over_vocabulary_slice(
      const Tensor& logits, const Tensor& targets, const VocabularySlice& slice) const = 0;
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
