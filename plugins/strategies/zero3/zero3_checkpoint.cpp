// zero3's checkpoints: the flat-layout family every data-parallel strategy shares
// (tessera/strategy_kit/flat_state.hpp), one shard per (unit, rank) piece, so that ddp, zero1/2 and
// zero3 checkpoints load into each other at any world size.
#include <algorithm>

#include "tessera/base/error.hpp"
#include "zero3_strategy.hpp"

namespace tessera::zero3 {

namespace {

// Shard k = unit * world + rank holds that rank's real elements of the unit.
std::vector<FlatShard> shards_of(const UnitPlan& plan, int world) {
  std::vector<FlatShard> shards;
  for (const auto& unit : plan.units) {
    for (int r = 0; r < world; ++r) {
      shards.push_back(
          {unit.flat_begin + unit.owned_begin(r), unit.flat_begin + unit.owned_end(r)});
    }
  }
  return shards;
}

}  // namespace

void Zero3Strategy::save(CheckpointWriter& writer) {
  TESSERA_CHECK(pool_ != nullptr, "zero3: save before setup");
  const int rank = setup_.world->rank();
  const int world = setup_.world->size();
  const auto shards = shards_of(plan_, world);
  const std::size_t slots = setup_.optimizer->state_per_param();
  std::vector<float> state;
  for (std::size_t u = 0; u < plan_.units.size(); ++u) {
    const auto& unit = plan_.units[u];
    const std::size_t k = u * static_cast<std::size_t>(world) + static_cast<std::size_t>(rank);
    const std::size_t length = shards[k].end - shards[k].begin;
    // Slot-major within the piece, as the format wants, from slot-major over all shards.
    state.resize(length * slots);
    for (std::size_t s = 0; s < slots; ++s) {
      std::copy_n(
          state_.begin() + static_cast<std::ptrdiff_t>(s * plan_.shard_total + unit.shard_offset),
          length, state.begin() + static_cast<std::ptrdiff_t>(s * length));
    }
    save_flat_shard(writer, layout_, shards, k,
                    std::span<const float>(params_).subspan(unit.shard_offset, length), state,
                    slots, rank == 0 && u == 0);
  }
}

void Zero3Strategy::load(const CheckpointReader& reader) {
  TESSERA_CHECK(pool_ != nullptr, "zero3: load before setup");
  const int rank = setup_.world->rank();
  const std::size_t slots = setup_.optimizer->state_per_param();
  std::vector<float> state;
  for (const auto& unit : plan_.units) {
    const std::size_t begin = unit.flat_begin + unit.owned_begin(rank);
    const std::size_t end = unit.flat_begin + unit.owned_end(rank);
    const std::size_t length = end - begin;
    state.assign(length * slots, 0.0F);
    load_flat_range(reader, layout_, begin, end,
                    std::span<float>(params_).subspan(unit.shard_offset, length), state, slots);
    for (std::size_t s = 0; s < slots; ++s) {
      std::copy_n(
          state.begin() + static_cast<std::ptrdiff_t>(s * length), length,
          state_.begin() + static_cast<std::ptrdiff_t>(s * plan_.shard_total + unit.shard_offset));
    }
  }
}

std::vector<float> Zero3Strategy::gather_parameters() {
  TESSERA_CHECK(pool_ != nullptr, "zero3: gather_parameters before setup");
  std::vector<float> flat(layout_.total, 0.0F);
  for (std::size_t u = 0; u < plan_.units.size(); ++u) {
    const auto& unit = plan_.units[u];
    const float* base = wait_gathered(u);
    std::copy_n(base, unit.elements(), flat.begin() + static_cast<std::ptrdiff_t>(unit.flat_begin));
    release_gathered(u);
  }
  return flat;
}

}  // namespace tessera::zero3
