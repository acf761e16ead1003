#include "layers/softmax_cross_entropy.hpp"

#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "layers/kernel_support.hpp"
#include "layers/layer_checks.hpp"

namespace tessera::layers {
namespace {

// Lanes of the row reductions: independent partial maxima and sums that the compiler keeps in
// vector registers, combined in a fixed order, so a row's result never depends on the thread.
constexpr std::size_t kLanes = 16;

struct RowSoftmax {
  float max = 0;
  std::size_t arg_max = 0;  // the first index holding the maximum
  double sum = 0;           // of e^(z - max)
};

// Writes e^(z[c] - max) to e[c] and returns the row's maximum, its first index and the sum.
// Always inlined, so that the AVX2 copy of the caller's body (VectorIsa) covers its loops.
[[gnu::always_inline]] inline RowSoftmax softmax_into(const float* z, float* e,
                                                      std::size_t classes) {
  RowSoftmax row;
  float lane_max[kLanes];
  std::fill_n(lane_max, kLanes, z[0]);
  const std::size_t whole = classes - classes % kLanes;
  for (std::size_t c = 0; c < whole; c += kLanes) {
    for (std::size_t k = 0; k < kLanes; ++k) {
      // std::max by value (its reference result kept the loop scalar); a NaN z is passed over
      // here as std::max passes it over, and reaches the loss through the exponentials.
      lane_max[k] = lane_max[k] < z[c + k] ? z[c + k] : lane_max[k];
    }
  }
  row.max = *std::max_element(lane_max, lane_max + kLanes);
  for (std::size_t c = whole; c < classes; ++c) row.max = std::max(row.max, z[c]);
  while (row.arg_max + 1 < classes && z[row.arg_max] != row.max) ++row.arg_max;  // NaN: stop
  for (std::size_t c = 0; c < classes; ++c) e[c] = exp_nonpositive(z[c] - row.max);
  double lane_sum[kLanes] = {};
  for (std::size_t c = 0; c < whole; c += kLanes) {
    for (std::size_t k = 0; k < kLanes; ++k) lane_sum[k] += static_cast<double>(e[c + k]);
  }
  for (const double part : lane_sum) row.sum += part;
  for (std::size_t c = whole; c < classes; ++c) row.sum += static_cast<double>(e[c]);
  return row;
}

}  // namespace

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
  result.grad_logits = Tensor(logits.shape(), DType::f32, compute.large_buffers());
  if (result.targets == 0) return result;
  float* g = result.grad_logits.as<float>().data();
  // Per-row results first, summed afterwards in row order: the mean does not depend on how the
  // rows were split over threads.
  std::vector<double> row_loss(n);
  std::vector<unsigned char> row_correct(n);
  const double inv_targets = 1.0 / static_cast<double>(result.targets);
  compute.parallel_for(n, std::max<std::size_t>(1, kParallelGrain / classes / 4),
                       [&](std::size_t r0, std::size_t r1) TESSERA_KERNEL_INLINE {
                         for (std::size_t r = r0; r < r1; ++r) {
                           if (t[r] == kIgnoreTarget) {  // zero gradient, as allocated
                             row_loss[r] = 0.0;
                             row_correct[r] = 0;
                             continue;
                           }
                           const auto target = static_cast<std::size_t>(t[r]);
                           const RowSoftmax row =
                               softmax_into(z + r * classes, g + r * classes, classes);
                           row_loss[r] = std::log(row.sum) + static_cast<double>(row.max) -
                                         static_cast<double>(z[r * classes + target]);
                           row_correct[r] = row.arg_max == target ? 1 : 0;
                           // The exponentials are in the gradient row already: one pass
                           // scales them into probabilities / targets.
                           const auto scale = static_cast<float>(inv_targets / row.sum);
                           float* grad = g + r * classes;
                           for (std::size_t c = 0; c < classes; ++c) grad[c] *= scale;
                           grad[target] -= static_cast<float>(inv_targets);
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
