#include "layers/softmax_cross_entropy.hpp"

#include <cmath>
#include <string>
#include <vector>

#include "layers/layer_checks.hpp"

namespace tessera::layers {

std::size_t loss_rows(const Tensor& logits, std::size_t classes) {
  TESSERA_CHECK(logits.dtype() == DType::f32 && logits.shape().size() >= 2 &&
                    logits.shape().back() == classes,
                "softmax_cross_entropy: expects f32 logits [..., " + std::to_string(classes) +
                    "], got " + std::string(dtype_name(logits.dtype())) + " " +
                    shape_text(logits.shape()));
  return logits.count() / classes;
}

std::size_t counted_targets(std::span<const std::int64_t> targets, std::size_t classes) {
  std::size_t counted = 0;
  for (std::size_t r = 0; r < targets.size(); ++r) {
    if (targets[r] == kIgnoreTarget) continue;
    TESSERA_CHECK(targets[r] >= 0 && static_cast<std::size_t>(targets[r]) < classes,
                  "softmax_cross_entropy: target " + std::to_string(targets[r]) + " of row " +
                      std::to_string(r) + " outside [0, " + std::to_string(classes) +
                      ") and not the ignore index " + std::to_string(kIgnoreTarget));
    ++counted;
  }
  return counted;
}

LossResult softmax_cross_entropy(const Tensor& logits, const Tensor& targets, std::size_t classes,
                                 const ComputeContext& compute) {
  const std::size_t n = loss_rows(logits, classes);
  TESSERA_CHECK(targets.dtype() == DType::i64 && targets.count() == n,
                "softmax_cross_entropy: expects " + std::to_string(n) +
                    " i64 targets, one per row " + "of logits " + shape_text(logits.shape()) +
                    ", got " + std::to_string(targets.count()) + " " +
                    std::string(dtype_name(targets.dtype())));
  const Device device = compute_device("softmax_cross_entropy", logits);
  if (device != Device::cpu()) {
    // The targets may stay where the data set put them (the host) or come along to the device.
    if (targets.device() != Device::cpu()) {
      check_same_device("softmax_cross_entropy", "the targets", targets, device);
    }
    return device::softmax_cross_entropy(logits, targets, classes);
  }
  const float* z = logits.as<float>().data();
  const std::int64_t* t = targets.as<std::int64_t>().data();
  LossResult result;
  result.targets = counted_targets({t, n}, classes);
  result.grad_logits = Tensor(logits.shape(), DType::f32);
  if (result.targets == 0) return result;
  float* g = result.grad_logits.as<float>().data();
  // Per-row results first, summed afterwards in row order: the mean does not depend on how the
  // rows were split over threads.
  std::vector<double> row_loss(n);
  std::vector<unsigned char> row_correct(n);
  const double inv_targets = 1.0 / static_cast<double>(result.targets);
  compute.parallel_for(n, std::max<std::size_t>(1, kParallelGrain / classes / 4),
                       [&](std::size_t r0, std::size_t r1) {
                         for (std::size_t r = r0; r < r1; ++r) {
                           const float* row = z + r * classes;
                           float* grad = g + r * classes;
                           if (t[r] == kIgnoreTarget) {  // zero gradient, as allocated
                             row_loss[r] = 0.0;
                             row_correct[r] = 0;
                             continue;
                           }
                           std::size_t arg_max = 0;
                           for (std::size_t c = 1; c < classes; ++c) {
                             if (row[c] > row[arg_max]) arg_max = c;
                           }
                           const double shift = row[arg_max];
                           double sum = 0.0;
                           for (std::size_t c = 0; c < classes; ++c)
                             sum += std::exp(static_cast<double>(row[c]) - shift);
                           const auto target = static_cast<std::size_t>(t[r]);
                           row_loss[r] = std::log(sum) + shift - static_cast<double>(row[target]);
                           row_correct[r] = arg_max == target ? 1 : 0;
                           for (std::size_t c = 0; c < classes; ++c) {
                             const double p = std::exp(static_cast<double>(row[c]) - shift) / sum;
                             grad[c] =
                                 static_cast<float>(((c == target ? p - 1.0 : p)) * inv_targets);
                           }
                         }
                       });
  double total = 0.0;
  for (std::size_t r = 0; r < n; ++r) {
    total += row_loss[r];
    result.correct += row_correct[r];
  }
  result.loss_sum = total;
  return result;
}

}  // namespace tessera::layers
