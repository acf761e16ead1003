#pragma once
// Softmax cross-entropy over [..., classes] logits and i64 targets, one per row of logits.

#include <cstdint>
#include <span>

#include "layers/compute_context.hpp"
#include "tessera/plugin/model.hpp"

namespace tessera::layers {

// The rows are the logits' elements / classes (a classifier's [n, classes], a language model's
// [n, T, classes]) and `targets` holds one per row. Sums -log softmax(logits)[target] over the
// rows whose target is not kIgnoreTarget, computed stably (log-sum-exp shifted by the row
// maximum), in row order; targets counts those rows, correct the ones whose first arg-max is
// the target; grad_logits (the logits' shape) is (softmax - onehot) / targets on them and 0 on
// ignored rows. No counted row gives loss 0 and a zero gradient.
// Logits on a CUDA device compute there (device_compute.hpp): targets on the host or that device,
// grad_logits on that device, loss and correct on the host (this call then waits for the device).
// Throws InvalidArgument for a target outside [0, classes) (and not kIgnoreTarget),
// mismatched shapes or devices.
// The rows of `logits` ([..., classes], f32), checked; and how many of `targets` count (not
// kIgnoreTarget), each checked to be in [0, classes). Shared by the host and device paths.
[[nodiscard]] std::size_t loss_rows(const Tensor& logits, std::size_t classes);
[[nodiscard]] std::size_t counted_targets(std::span<const std::int64_t> targets,
                                          std::size_t classes);

[[nodiscard]] LossResult softmax_cross_entropy(const Tensor& logits, const Tensor& targets,
                                               std::size_t classes, const ComputeContext& compute);

// Megatron's vocabulary-parallel cross-entropy (Shoeybi et al. 2019, section 3): the loss
// softmax_cross_entropy gives for the whole logits, from logits [..., slice.size()] that hold
// classes [slice.begin, slice.end) of slice.classes, the other ranks of slice.group holding the
// rest; no rank forms [rows, classes]. Megatron's three reductions in two all-reduces over the
// group: the maximum logit of each row, then one sum of three values a row (e^(z - max) over the
// rank's classes, the target's logit from the rank whose classes hold it, and whether a class
// before the target reaches the maximum, for the first arg-max). loss_sum, targets and correct
// are the same on every rank; grad_logits is this rank's slice of (softmax - onehot) / targets.
// It equals softmax_cross_entropy's to rounding (the sum of exponentials adds in another order).
// Collective over slice.group (every rank calls it for the same targets). Host memory only:
// throws InvalidArgument for logits or targets on a device, and as softmax_cross_entropy does.
[[nodiscard]] LossResult vocabulary_parallel_cross_entropy(const Tensor& logits,
                                                           const Tensor& targets,
                                                           const VocabularySlice& slice,
                                                           const ComputeContext& compute);

}  // namespace tessera::layers
