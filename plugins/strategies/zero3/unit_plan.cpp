#include "unit_plan.hpp"

#include <algorithm>

#include "tessera/base/error.hpp"

namespace tessera::zero3 {

namespace {

constexpr std::size_t kShardAlignment = 16;  // floats: 64 bytes

}  // namespace

std::size_t Unit::owned_begin(int rank) const noexcept {
  return std::min(elements(), static_cast<std::size_t>(rank) * shard_elements);
}

std::size_t Unit::owned_end(int rank) const noexcept {
  return std::min(elements(), static_cast<std::size_t>(rank + 1) * shard_elements);
}

UnitPlan UnitPlan::make(const Model& model, const FlatLayout& layout, std::size_t unit_size,
                        int world) {
  TESSERA_CHECK(unit_size >= 1, "zero3: unit_size must be at least 1");
  TESSERA_CHECK(world >= 1, "zero3: world size must be at least 1");
  UnitPlan plan;
  std::size_t layers_with_params = 0;  // in the current unit
  for (std::size_t l = 0; l < model.layer_count(); ++l) {
    // Its own parameters: a tied one belongs to its owner's unit.
    std::vector<std::size_t> own;
    for (std::size_t s = 0; s < layout.layer_params.at(l).size(); ++s) {
      if (!layout.borrowed(l, s)) own.push_back(layout.layer_params[l][s]);
    }
    const std::size_t count = own.size();
    const bool starts_unit = plan.units.empty() || (count > 0 && layers_with_params == unit_size);
    if (starts_unit) {
      Unit unit;
      unit.first_layer = l;
      unit.flat_begin = plan.units.empty() ? 0 : plan.units.back().flat_end;
      unit.flat_end = unit.flat_begin;
      plan.units.push_back(unit);
      layers_with_params = 0;
    }
    Unit& unit = plan.units.back();
    unit.end_layer = l + 1;
    for (const std::size_t index : own) {
      unit.params.push_back(index);
      unit.flat_end = layout.params.at(index).offset + layout.params.at(index).count;
    }
    if (count > 0) ++layers_with_params;
  }
  const auto ranks = static_cast<std::size_t>(world);
  for (auto& unit : plan.units) {
    const std::size_t per_rank = (unit.elements() + ranks - 1) / ranks;
    unit.shard_elements = (per_rank + kShardAlignment - 1) / kShardAlignment * kShardAlignment;
    unit.shard_offset = plan.shard_total;
    plan.shard_total += unit.shard_elements;
    plan.largest_gathered = std::max(plan.largest_gathered, ranks * unit.shard_elements);
  }
  return plan;
}

}  // namespace tessera::zero3
