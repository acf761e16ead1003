#pragma once
// Gradients whose squares add to different doubles in a different order, or when a norm block
// is summed from partials: magnitudes spread over 2^-30 .. 2^30, signs mixed.

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <vector>

namespace tessera::testing {

inline std::vector<float> spread_gradients(std::size_t count, std::uint64_t seed = 12345) {
  std::vector<float> g(count);
  std::uint64_t x = seed;
  for (auto& v : g) {
    x = x * 6364136223846793005ULL + 1442695040888963407ULL;
    const auto mantissa = static_cast<float>((x >> 40) & 0xFFFFFF) / 16777216.0F + 0.5F;
    const int exponent = static_cast<int>((x >> 20) % 61) - 30;
    v = ((x >> 63) != 0 ? -1.0F : 1.0F) * std::ldexp(mantissa, exponent);
  }
  return g;
}

}  // namespace tessera::testing
