#pragma once
// Counter-based random numbers: value i of stream s under seed k is a pure function of (k, s, i),
// so any shard of a tensor, any sample of a data set, can be generated on its own and every
// rank gets the same bits without generating what it does not hold.

#include <cstdint>

namespace tessera {

// The splitmix64 finaliser: a bijection on 64 bits with full avalanche.
[[nodiscard]] constexpr std::uint64_t mix64(std::uint64_t x) noexcept {
  x ^= x >> 30;
  x *= 0xbf58476d1ce4e5b9ULL;
  x ^= x >> 27;
  x *= 0x94d049bb133111ebULL;
  x ^= x >> 31;
  return x;
}

[[nodiscard]] constexpr std::uint64_t counter_random(std::uint64_t seed, std::uint64_t stream,
                                                     std::uint64_t counter) noexcept {
  const std::uint64_t key = mix64(seed + 0x9e3779b97f4a7c15ULL * (stream + 1));
  return mix64(key ^ (counter * 0xd6e8feb86659fd93ULL + 0x632be59bd9b4e019ULL));
}

// Uniform in [0, 1) with 24 random bits: exactly representable, so the same on every platform.
[[nodiscard]] constexpr float counter_uniform(std::uint64_t seed, std::uint64_t stream,
                                              std::uint64_t counter) noexcept {
  return static_cast<float>(counter_random(seed, stream, counter) >> 40) * 0x1.0p-24F;
}

}  // namespace tessera
