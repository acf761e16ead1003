#pragma once
// How zero3 cuts a model into units and each unit's flat parameters into one shard per rank.

#include <cstddef>
#include <vector>

#include "tessera/plugin/model.hpp"
#include "tessera/strategy_kit/flat_state.hpp"

namespace tessera::zero3 {

// Layers [first_layer, end_layer) gathered and freed together. Their parameters are the
// contiguous range [flat_begin, flat_end) of the model's FlatLayout; each rank holds
// shard_elements of it (rank r: unit elements [r * shard_elements, (r + 1) * shard_elements),
// the tail past the unit being zero padding), so the gathered unit is world * shard_elements
// long with the parameters at the front in FlatLayout order.
struct Unit {
  std::size_t first_layer = 0;
  std::size_t end_layer = 0;
  std::size_t flat_begin = 0;
  std::size_t flat_end = 0;
  std::size_t shard_elements = 0;
  std::size_t shard_offset = 0;     // where this unit's shard starts in a rank's shard storage
  std::vector<std::size_t> params;  // indices into FlatLayout::params

  [[nodiscard]] std::size_t elements() const noexcept { return flat_end - flat_begin; }
  // This rank's real (unpadded) elements of the unit: unit-relative [begin, end).
  [[nodiscard]] std::size_t owned_begin(int rank) const noexcept;
  [[nodiscard]] std::size_t owned_end(int rank) const noexcept;
};

struct UnitPlan {
  std::vector<Unit> units;
  std::size_t shard_total = 0;       // a rank's shard storage, padding included
  std::size_t largest_gathered = 0;  // world * max shard_elements

  // Every `unit_size` consecutive layers that have parameters form a unit; layers without
  // parameters of their own (activations, or only tied ones: those are their owner's unit's)
  // join the unit before them, or the first unit when they lead.
  // Shards are rounded up to 16 elements so every rank's block of a gathered unit starts on
  // a 64-byte boundary. Throws InvalidArgument for unit_size 0 or world < 1.
  [[nodiscard]] static UnitPlan make(const Model& model, const FlatLayout& layout,
                                     std::size_t unit_size, int world);
};

}  // namespace tessera::zero3
