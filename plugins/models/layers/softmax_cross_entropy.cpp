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

// The largest of z[0 .. classes). The helpers are always inlined, so that the AVX2 copy of the
// caller's body (VectorIsa) covers their loops.
[[gnu::always_inline]] inline float row_max(const float* z, std::size_t classes) {
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
  float max = *std::max_element(lane_max, lane_max + kLanes);
  for (std::size_t c = whole; c < classes; ++c) max = std::max(max, z[c]);
  return max;
}

// The first index of z[0 .. classes) that holds `max`; classes - 1 when none does (NaN).
[[gnu::always_inline]] inline std::size_t first_index_of(const float* z, std::size_t classes,
                                                         float max) {
  std::size_t at = 0;
  while (at + 1 < classes && z[at] != max) ++at;
  return at;
}

// Writes e^(z[c] - max) to e[c] (max: at least every z[c]) and returns their sum.
[[gnu::always_inline]] inline double exponentials_into(const float* z, float* e,
                                                       std::size_t classes, float max) {
  for (std::size_t c = 0; c < classes; ++c) e[c] = exp_nonpositive(z[c] - max);
  const std::size_t whole = classes - classes % kLanes;
  double lane_sum[kLanes] = {};
  for (std::size_t c = 0; c < whole; c += kLanes) {
    for (std::size_t k = 0; k < kLanes; ++k) lane_sum[k] += static_cast<double>(e[c + k]);
  }
  double sum = 0;
  for (const double part : lane_sum) sum += part;
  for (std::size_t c = whole; c < classes; ++c) sum += static_cast<double>(e[c]);
  return sum;
}

// Writes e^(z[c] - max) to e[c] and returns the row's maximum, its first index and the sum.
[[gnu::always_inline]] inline RowSoftmax softmax_into(const float* z, float* e,
                                                      std::size_t classes) {
  RowSoftmax row;
  row.max = row_max(z, classes);
  row.arg_max = first_index_of(z, classes, row.max);
  row.sum = exponentials_into(z, e, classes, row.max);
  return row;
}

// The exponentials in a gradient row scaled into probabilities / targets, and the target's
// -1 / targets (target: an index of the row, or past it when the row's classes do not hold it).
[[gnu::always_inline]] inline void gradient_row(float* grad, std::size_t classes, double sum,
                                                double inv_targets, std::size_t target) {
  const auto scale = static_cast<float>(inv_targets / sum);
  for (std::size_t c = 0; c < classes; ++c) grad[c] *= scale;
  if (target < classes) grad[target] -= static_cast<float>(inv_targets);
}

void check_targets_tensor(const Tensor& targets, std::size_t rows, const Tensor& logits) {
  TESSERA_CHECK(targets.dtype() == DType::i64 && targets.count() == rows,
                "softmax_cross_entropy: expects " + std::to_string(rows) +
                    " i64 targets, one per row " + "of logits " + shape_text(logits.shape()) +
                    ", got " + std::to_string(targets.count()) + " " +
                    std::string(dtype_name(targets.dtype())));
}

// Per-row results summed in row order into `result`: the total has the same bits however the
// rows were split over threads.
void add_rows(LossResult& result, const std::vector<double>& row_loss,
              const std::vector<unsigned char>& row_correct) {
  double total = 0.0;
  for (std::size_t r = 0; r < row_loss.size(); ++r) {
    total += row_loss[r];
    result.correct += row_correct[r];
  }
  result.loss_sum = total;
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
  check_targets_tensor(targets, n, logits);
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
                           gradient_row(g + r * classes, classes, row.sum, inv_targets, target);
                         }
                       });
  add_rows(result, row_loss, row_correct);
  return result;
}

LossResult vocabulary_parallel_cross_entropy(const Tensor& logits, const Tensor& targets,
                                             const VocabularySlice& slice,
                                             const ComputeContext& compute) {
  TESSERA_CHECK(slice.group != nullptr && slice.begin < slice.end && slice.end <= slice.classes,
                "vocabulary_parallel_cross_entropy: classes [" + std::to_string(slice.begin) +
                    ", " + std::to_string(slice.end) + ") of " + std::to_string(slice.classes) +
                    " with " + (slice.group == nullptr ? "no" : "a") + " tensor group");
  const std::size_t width = slice.size();
  const std::size_t n = loss_rows(logits, width);
  check_targets_tensor(targets, n, logits);
  if (compute_device("vocabulary_parallel_cross_entropy", logits) != Device::cpu() ||
      targets.device() != Device::cpu()) {
    throw InvalidArgument(
        "vocabulary_parallel_cross_entropy: computes in host memory only; the logits are on " +
        to_string(logits.device()) + ", the targets on " + to_string(targets.device()));
  }
  const float* z = logits.as<float>().data();
  const std::int64_t* t = targets.as<std::int64_t>().data();
  LossResult result;
  result.targets = counted_targets({t, n}, slice.classes);
  result.grad_logits = Tensor(logits.shape(), DType::f32, compute.large_buffers());
  // The targets are the same on every rank of the group, so all return here or none does.
  if (result.targets == 0) return result;
  float* g = result.grad_logits.as<float>().data();
  const std::size_t grain = std::max<std::size_t>(1, kParallelGrain / width / 4);

  // 1. The maximum logit of each row over the whole vocabulary (an ignored row's stays 0).
  Tensor maxima({n}, DType::f32);
  float* max = maxima.as<float>().data();
  compute.parallel_for(n, grain, [&](std::size_t r0, std::size_t r1) TESSERA_KERNEL_INLINE {
    for (std::size_t r = r0; r < r1; ++r) {
      if (t[r] != kIgnoreTarget) max[r] = row_max(z + r * width, width);
    }
  });
  slice.group->max(maxima);

  // 2. One sum over the group of three values a row: e^(z - max) over this rank's classes, the
  // target's logit (only the rank whose classes hold it adds it; x + 0 is x, so every rank gets
  // its exact value) and 1 where a class before the target reaches the maximum (the first
  // arg-max is then not the target).
  enum : std::size_t { kExponentials, kTargetLogit, kEarlierMaximum, kPerRow };
  Tensor sums({n, kPerRow}, DType::f64);
  double* reduced = sums.as<double>().data();
  compute.parallel_for(n, grain, [&](std::size_t r0, std::size_t r1) TESSERA_KERNEL_INLINE {
    for (std::size_t r = r0; r < r1; ++r) {
      if (t[r] == kIgnoreTarget) continue;
      const float* row = z + r * width;
      double* out = reduced + r * kPerRow;
      out[kExponentials] = exponentials_into(row, g + r * width, width, max[r]);
      const auto target = static_cast<std::size_t>(t[r]);
      if (target >= slice.begin && target < slice.end) {
        out[kTargetLogit] = static_cast<double>(row[target - slice.begin]);
      }
      const std::size_t first = slice.begin + first_index_of(row, width, max[r]);
      out[kEarlierMaximum] = row[first - slice.begin] == max[r] && first < target ? 1.0 : 0.0;
    }
  });
  slice.group->sum(sums);

  // 3. Each row's loss and correctness (the same on every rank) and this rank's gradient.
  std::vector<double> row_loss(n, 0.0);
  std::vector<unsigned char> row_correct(n, 0);
  const double inv_targets = 1.0 / static_cast<double>(result.targets);
  compute.parallel_for(n, grain, [&](std::size_t r0, std::size_t r1) TESSERA_KERNEL_INLINE {
    for (std::size_t r = r0; r < r1; ++r) {
      if (t[r] == kIgnoreTarget) continue;
      const double* in = reduced + r * kPerRow;
      row_loss[r] = std::log(in[kExponentials]) + static_cast<double>(max[r]) - in[kTargetLogit];
      row_correct[r] =
          in[kTargetLogit] == static_cast<double>(max[r]) && in[kEarlierMaximum] == 0.0 ? 1 : 0;
      // Past the row when this rank's classes do not hold the target: no -1 / targets here.
      const auto target = static_cast<std::size_t>(t[r]);
      gradient_row(g + r * width, width, in[kExponentials], inv_targets,
                   target >= slice.begin ? target - slice.begin : width);
    }
  });
  add_rows(result, row_loss, row_correct);
  return result;
}

}  // namespace tessera::layers
