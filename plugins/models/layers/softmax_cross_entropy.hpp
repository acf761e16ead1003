#pragma once
// Softmax cross-entropy over [n, classes] logits and i64 targets.

#include "layers/compute_context.hpp"
#include "tessera/plugin/model.hpp"

namespace tessera::layers {

// Mean over the n rows of -log softmax(logits)[target], computed stably (log-sum-exp shifted
// by the row maximum); correct counts rows whose first arg-max equals the target; grad_logits
// is (softmax - onehot) / n. n = 0 gives loss 0 and an empty [0, classes] gradient.
// Logits on a CUDA device compute there (device_compute.hpp): targets on the host or that device,
// grad_logits on that device, loss and correct on the host (this call then waits for the device).
// Throws InvalidArgument for a target outside [0, classes), mismatched shapes or devices.
[[nodiscard]] LossResult softmax_cross_entropy(const Tensor& logits, const Tensor& targets,
                                               std::size_t classes, const ComputeContext& compute);

}  // namespace tessera::layers
