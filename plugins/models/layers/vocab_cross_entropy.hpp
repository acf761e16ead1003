#pragma once
// Softmax cross-entropy over a vocabulary, per token, with an ignore index (PyTorch's
// F.cross_entropy(logits, targets, ignore_index=...) with reduction "sum", and the count of
// counted targets so that the caller forms the mean per token). Forward and backward side by
// side over spans; backward recomputes the softmax from the logits and the per-row log-sum-exp
// forward saved, so nothing of size [rows, vocab] is kept besides the logits themselves.
// (softmax_cross_entropy.hpp is the classifier's loss over Tensors: mean over rows, no ignore.)
//
// Layouts (row-major):
//   logits, grad_logits : [rows, vocab]   rows = batch * time
//   targets             : [rows]          i64, in [0, vocab) or equal to ignore_index
//   log_sum_exp         : [rows]          saved by forward (an ignored row's is 0)
//
// Real is float or double; the loss sum is accumulated in double, row by row in row order, so
// it has the same bits at any thread count (as does everything else: rows are independent).

#include <cstddef>
#include <cstdint>
#include <span>

#include "layers/compute_context.hpp"

namespace tessera::layers {

inline constexpr std::int64_t kDefaultIgnoreIndex = -100;  // PyTorch's default

struct CrossEntropySum {
  double loss_sum = 0.0;    // sum over counted rows of log_sum_exp - logit[target]
  std::size_t counted = 0;  // rows whose target is not ignore_index
};

// Throws InvalidArgument for a target outside [0, vocab) that is not ignore_index, naming its row.
template <class Real>
CrossEntropySum vocab_cross_entropy_forward(std::span<Real> log_sum_exp,
                                            std::span<const Real> logits,
                                            std::span<const std::int64_t> targets,
                                            std::size_t vocab, std::int64_t ignore_index,
                                            const ComputeContext& compute);

// Writes (not adds) grad_logits = loss_scale * (softmax(logits) - onehot(target)) on counted
// rows and 0 on ignored rows; loss_scale = 1 / counted gives the gradient of the mean per token.
// The logits are the forward's, unchanged.
template <class Real>
void vocab_cross_entropy_backward(std::span<Real> grad_logits, std::span<const Real> logits,
                                  std::span<const Real> log_sum_exp,
                                  std::span<const std::int64_t> targets, std::size_t vocab,
                                  std::int64_t ignore_index, Real loss_scale,
                                  const ComputeContext& compute);

}  // namespace tessera::layers
