#pragma once
// What the span kernels of the transformer layers share (layer_norm, gelu, embedding,
// causal_attention, vocab_cross_entropy): argument checks that name the kernel, the grain
// that turns a per-item cost into a parallel_for grain, and a float exp the compiler can
// vectorise.

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <span>
#include <string>

#include "layers/compute_context.hpp"
#include "tessera/base/error.hpp"

namespace tessera::layers {

// Throws InvalidArgument unless `values` holds exactly `expected` elements.
template <class T>
void require_size(const char* kernel, const char* what, std::span<T> values, std::size_t expected) {
  if (values.size() == expected) return;
  throw InvalidArgument(std::string(kernel) + ": " + what + " has " +
                        std::to_string(values.size()) + " elements, expected " +
                        std::to_string(expected) + " (see the layout in its header)");
}

// e^x for x <= 0, within a few ulp of expf, as arithmetic the compiler vectorises (a call to
// expf per element made the vocabulary's 50,257 exponentials per row the costliest part of a
// GPT step; tanhf did the same to GELU). Vectorises only where the file is built with
// -fno-trapping-math (plugins/models/CMakeLists.txt). x = n ln2 + r with |r| <= ln2 / 2; e^r by
// Cephes' degree-7 polynomial for expf; 2^n put into the exponent bits. Rounding and 2^n use
// the 1.5 * 2^23 trick (n lands in the low mantissa bits), so there is no float-to-int conversion:
// a NaN stays NaN, and below -87 (e^-87 is near the smallest normal float) the result is 0.
[[gnu::always_inline]] inline float exp_nonpositive(float x) {
  constexpr float kLog2e = 1.44269504088896341F;
  constexpr float kLn2High = 0.693359375F;  // ln 2 split so that n * kLn2High is exact
  constexpr float kLn2Low = -2.12194440e-4F;
  constexpr float kRoundingShift = 0x1.8p23F;
  const bool underflow = x < -87.0F;
  x = underflow ? -87.0F : x;
  const float shifted = x * kLog2e + kRoundingShift;
  const float n = shifted - kRoundingShift;
  const float r = x - n * kLn2High - n * kLn2Low;
  float p = 1.9875691500e-4F;
  p = p * r + 1.3981999507e-3F;
  p = p * r + 8.3334519073e-3F;
  p = p * r + 4.1665795894e-2F;
  p = p * r + 1.6666665459e-1F;
  p = p * r + 5.0000001201e-1F;
  const float e_r = p * r * r + r + 1.0F;
  const float two_to_n = std::bit_cast<float>((std::bit_cast<std::uint32_t>(shifted) + 127U) << 23);
  return underflow ? 0.0F : e_r * two_to_n;
}

// Items per task when one item costs about `item_cost` element operations.
inline std::size_t grain_for(std::size_t item_cost) {
  return std::max<std::size_t>(1, kParallelGrain / std::max<std::size_t>(item_cost, 1));
}

}  // namespace tessera::layers
