#include "tessera/strategy_kit/grad_clip.hpp"

#include <cmath>

namespace tessera {

double gradient_sum_of_squares(std::span<const float> grads) noexcept {
  // Four interleaved accumulators let the compiler pipeline the adds; the grouping is fixed, so
  // the result is still the same bits every run.
  double acc[4] = {0.0, 0.0, 0.0, 0.0};
  std::size_t i = 0;
  for (; i + 4 <= grads.size(); i += 4) {
    for (std::size_t k = 0; k < 4; ++k) {
      const auto g = static_cast<double>(grads[i + k]);
      acc[k] += g * g;
    }
  }
  for (; i < grads.size(); ++i) {
    const auto g = static_cast<double>(grads[i]);
    acc[0] += g * g;
  }
  return (acc[0] + acc[1]) + (acc[2] + acc[3]);
}

float global_norm(double total_sum_of_squares) noexcept {
  return static_cast<float>(std::sqrt(total_sum_of_squares));
}

float clip_coefficient(double total_sum_of_squares, float max_norm) noexcept {
  if (!(max_norm > 0.0F)) return 1.0F;
  const float coefficient = max_norm / (global_norm(total_sum_of_squares) + 1e-6F);
  return coefficient < 1.0F ? coefficient : 1.0F;
}

void scale_gradients(std::span<float> grads, float coefficient) noexcept {
  if (coefficient == 1.0F) return;
  for (float& g : grads) g *= coefficient;
}

}  // namespace tessera
