#include "layers/vocab_cross_entropy.hpp"

#include <cmath>
#include <string>
#include <vector>

#include "layers/kernel_support.hpp"

namespace tessera::layers {
namespace {

// Rows of the logits; checks the sizes and every target.
std::size_t checked_rows(std::size_t logit_count, std::span<const std::int64_t> targets,
                         std::size_t vocab, std::int64_t ignore_index) {
  TESSERA_CHECK(vocab > 0, "vocab_cross_entropy: vocab must be positive");
  const std::size_t rows = targets.size();
  TESSERA_CHECK(logit_count == rows * vocab,
                "vocab_cross_entropy: logits have " + std::to_string(logit_count) +
                    " elements, expected " + std::to_string(rows) + " targets x " +
                    std::to_string(vocab) + " (see the layout in its header)");
  for (std::size_t r = 0; r < rows; ++r) {
    const std::int64_t t = targets[r];
    if (t == ignore_index || (t >= 0 && static_cast<std::size_t>(t) < vocab)) continue;
    throw InvalidArgument("vocab_cross_entropy: target " + std::to_string(t) + " of row " +
                          std::to_string(r) + " is outside [0, " + std::to_string(vocab) +
                          ") and is not the ignore index " + std::to_string(ignore_index));
  }
  return rows;
}

}  // namespace

template <class Real>
CrossEntropySum vocab_cross_entropy_forward(std::span<Real> log_sum_exp,
                                            std::span<const Real> logits,
                                            std::span<const std::int64_t> targets,
                                            std::size_t vocab, std::int64_t ignore_index,
                                            const ComputeContext& compute) {
  const std::size_t rows = checked_rows(logits.size(), targets, vocab, ignore_index);
  require_size("vocab_cross_entropy", "log_sum_exp", log_sum_exp, rows);
  std::vector<double> row_loss(rows, 0.0);
  compute.parallel_for(rows, grain_for(2 * vocab),
                       [&](std::size_t r0, std::size_t r1) TESSERA_KERNEL_INLINE {
                         for (std::size_t r = r0; r < r1; ++r) {
                           log_sum_exp[r] = 0;
                           if (targets[r] == ignore_index) continue;
                           const Real* z = logits.data() + r * vocab;
                           Real shift = z[0];
                           for (std::size_t c = 1; c < vocab; ++c) shift = std::max(shift, z[c]);
                           Real sum = 0;
                           for (std::size_t c = 0; c < vocab; ++c) sum += std::exp(z[c] - shift);
                           log_sum_exp[r] = shift + std::log(sum);
                           row_loss[r] = static_cast<double>(log_sum_exp[r] - z[targets[r]]);
                         }
                       });
  CrossEntropySum result;
  for (std::size_t r = 0; r < rows; ++r) {
    if (targets[r] == ignore_index) continue;
    result.loss_sum += row_loss[r];
    ++result.counted;
  }
  return result;
}

template <class Real>
void vocab_cross_entropy_backward(std::span<Real> grad_logits, std::span<const Real> logits,
                                  std::span<const Real> log_sum_exp,
                                  std::span<const std::int64_t> targets, std::size_t vocab,
                                  std::int64_t ignore_index, Real loss_scale,
                                  const ComputeContext& compute) {
  const std::size_t rows = checked_rows(logits.size(), targets, vocab, ignore_index);
  require_size("vocab_cross_entropy", "log_sum_exp", log_sum_exp, rows);
  require_size("vocab_cross_entropy", "grad_logits", grad_logits, rows * vocab);
  compute.parallel_for(rows, grain_for(2 * vocab),
                       [&](std::size_t r0, std::size_t r1) TESSERA_KERNEL_INLINE {
                         for (std::size_t r = r0; r < r1; ++r) {
                           const Real* z = logits.data() + r * vocab;
                           Real* dz = grad_logits.data() + r * vocab;
                           if (targets[r] == ignore_index) {
                             std::fill(dz, dz + vocab, Real(0));
                             continue;
                           }
                           for (std::size_t c = 0; c < vocab; ++c)
                             dz[c] = loss_scale * std::exp(z[c] - log_sum_exp[r]);
                           dz[targets[r]] -= loss_scale;
                         }
                       });
}

template CrossEntropySum vocab_cross_entropy_forward<float>(std::span<float>,
                                                            std::span<const float>,
                                                            std::span<const std::int64_t>,
                                                            std::size_t, std::int64_t,
                                                            const ComputeContext&);
template CrossEntropySum vocab_cross_entropy_forward<double>(std::span<double>,
                                                             std::span<const double>,
                                                             std::span<const std::int64_t>,
                                                             std::size_t, std::int64_t,
                                                             const ComputeContext&);
template void vocab_cross_entropy_backward<float>(std::span<float>, std::span<const float>,
                                                  std::span<const float>,
                                                  std::span<const std::int64_t>, std::size_t,
                                                  std::int64_t, float, const ComputeContext&);
template void vocab_cross_entropy_backward<double>(std::span<double>, std::span<const double>,
                                                   std::span<const double>,
                                                   std::span<const std::int64_t>, std::size_t,
                                                   std::int64_t, double, const ComputeContext&);

}  // namespace tessera::layers
