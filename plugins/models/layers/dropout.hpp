#pragma once
// Dropout that every strategy and mesh draws alike. Whether element i is kept is a pure function
// of (seed, step, site, i) through the counter-based generator of parameter initialisation
// (tessera/base/random.hpp): no generator state to carry or checkpoint, no mask saved for
// backward (it is drawn again), and a rank that holds elements [first, first + n) of a batch
// draws exactly the bits a rank holding the whole batch draws there, so ddp, zero1/2/3 and any
// hybrid mesh stay bitwise equal with dropout on. Inverted dropout, as PyTorch's: kept elements
// are scaled by 1 / (1 - p), so evaluation, where dropout is off, needs no rescaling.
//
// Layouts: input, output, grad_output, grad_input: any n elements, element-wise; element i of the
// span is element key.first + i of the site's activation over the whole global batch. Backward
// ADDS (+=) into grad_input, as every transformer span kernel (layer_norm.hpp). Real is float or
// double. p in [0, 1); p = 0 copies (and backward adds) the values unchanged, bit for bit.

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <span>
#include <string>

#include "tessera/base/error.hpp"
#include "tessera/base/random.hpp"

namespace tessera::layers {

// Which mask: the run's seed, the update the forward pass belongs to (StepInfo::step), the
// dropout site (a model numbers its sites: layer index times sites per layer plus the site),
// and where this call's element 0 lies in the site's activation over the global batch.
struct DropoutKey {
  std::uint64_t seed = 0;
  std::int64_t step = 0;
  std::uint64_t site = 0;
  std::uint64_t first = 0;
};

// The generator stream of a (step, site): the top bit set, so that no dropout stream is a
// parameter's initialisation stream (those are parameter indices under the same seed).
[[nodiscard]] constexpr std::uint64_t dropout_stream(const DropoutKey& key) noexcept {
  const std::uint64_t step_and_site =
      (static_cast<std::uint64_t>(key.step) * 0x100000001b3ULL) ^ key.site;
  return (std::uint64_t{1} << 63) | (mix64(step_and_site) >> 1);
}

// Whether element i of the call keyed by `key` survives dropout with probability p.
[[nodiscard]] inline bool dropout_keeps(const DropoutKey& key, float p, std::size_t i) noexcept {
  return counter_uniform(key.seed, dropout_stream(key), key.first + i) >= p;
}

// scales[j] = dropout_keeps(key, p, offset + j) ? 1 / (1 - p) : 0 for j < scales.size(): a row
// of a mask as factors, for a kernel that drops inside its own loops (causal_attention.hpp).
// Always inlined, so that the copy of the kernel it is called from vectorises it for its target.
template <class Real>
[[gnu::always_inline]] inline void dropout_scales(std::span<Real> scales, float p,
                                                  const DropoutKey& key, std::uint64_t offset) {
  const Real kept = Real(1) / (Real(1) - static_cast<Real>(p));
  for (std::size_t j = 0; j < scales.size(); ++j) {
    scales[j] = dropout_keeps(key, p, offset + j) ? kept : Real(0);
  }
}

inline void check_dropout_rate(float p) {
  TESSERA_CHECK(p >= 0.0F && p < 1.0F,
                "dropout: the rate must be in [0, 1), got " + std::to_string(p));
}

// output[i] = keeps(i) ? input[i] / (1 - p) : 0.
template <class Real>
void dropout_forward(std::span<Real> output, std::span<const Real> input, float p,
                     const DropoutKey& key) {
  check_dropout_rate(p);
  TESSERA_CHECK(output.size() == input.size(), "dropout_forward: output and input sizes differ");
  if (p == 0.0F) {
    std::copy(input.begin(), input.end(), output.begin());
    return;
  }
  const Real scale = Real(1) / (Real(1) - static_cast<Real>(p));
  for (std::size_t i = 0; i < input.size(); ++i) {
    output[i] = dropout_keeps(key, p, i) ? input[i] * scale : Real(0);
  }
}

// grad_input[i] += keeps(i) ? grad_output[i] / (1 - p) : 0, the mask drawn again from `key`.
template <class Real>
void dropout_backward(std::span<Real> grad_input, std::span<const Real> grad_output, float p,
                      const DropoutKey& key) {
  check_dropout_rate(p);
  TESSERA_CHECK(grad_input.size() == grad_output.size(), "dropout_backward: gradient sizes differ");
  if (p == 0.0F) {
    for (std::size_t i = 0; i < grad_output.size(); ++i) grad_input[i] += grad_output[i];
    return;
  }
  const Real scale = Real(1) / (Real(1) - static_cast<Real>(p));
  for (std::size_t i = 0; i < grad_output.size(); ++i) {
    if (dropout_keeps(key, p, i)) grad_input[i] += grad_output[i] * scale;
  }
}

}  // namespace tessera::layers
