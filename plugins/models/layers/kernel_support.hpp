#pragma once
// What the span kernels of the transformer layers share (layer_norm, gelu, embedding,
// causal_attention, vocab_cross_entropy): argument checks that name the kernel, and the grain
// that turns a per-item cost into a parallel_for grain.

#include <algorithm>
#include <cstddef>
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

// Items per task when one item costs about `item_cost` element operations.
inline std::size_t grain_for(std::size_t item_cost) {
  return std::max<std::size_t>(1, kParallelGrain / std::max<std::size_t>(item_cost, 1));
}

}  // namespace tessera::layers
