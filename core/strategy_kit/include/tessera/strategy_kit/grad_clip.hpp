#pragma once
// Global gradient-norm clipping, in three pieces so that it is correct over shards: each rank
// sums the squares of the gradients it holds, the strategy all-reduces those sums (f64, sum),
// and every rank scales its own gradients by the same coefficient.
//
//   double local = gradient_sum_of_squares(my_grads);        // per rank, per shard
//   all_reduce(local, sum);                                   // the strategy's collective
//   float coef = clip_coefficient(local, max_norm);           // identical on every rank
//   scale_gradients(my_grads, coef);

#include <span>

namespace tessera {

// Sum of grads[i]^2 in double, in a fixed grouping (bitwise reproducible): four accumulators
// take elements i mod 4 in index order, a tail goes to the first, and the four are added as
// (a0 + a1) + (a2 + a3). Each square of a float is exact in double, so only the additions round.
[[nodiscard]] double gradient_sum_of_squares(std::span<const float> grads) noexcept;

// The global L2 norm from the all-reduced sum of squares, rounded to float. Different shardings
// add the squares in different orders and may differ in the last bits of the double; rounding
// to float makes every strategy see the same norm except in the rare case of a tie at float
// precision.
[[nodiscard]] float global_norm(double total_sum_of_squares) noexcept;

// PyTorch's clip_grad_norm_ rule: max_norm / (norm + 1e-6) when that is below 1, else 1.
// max_norm <= 0 disables clipping (returns 1). Computed in float from global_norm().
[[nodiscard]] float clip_coefficient(double total_sum_of_squares, float max_norm) noexcept;

// grads[i] *= coefficient; a coefficient of exactly 1 leaves the memory untouched.
void scale_gradients(std::span<float> grads, float coefficient) noexcept;

}  // namespace tessera
