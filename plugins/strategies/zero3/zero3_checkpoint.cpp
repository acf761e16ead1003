// zero3's checkpoints: each rank writes the slices of parameters its shard of every unit covers
// (tessera/strategy_kit/param_checkpoint.hpp), so that ddp, zero1/2 and zero3 checkpoints load
// into each other at any world size.
#include <algorithm>

#include "tessera/base/error.hpp"
#include "tessera/strategy_kit/device_memory.hpp"
#include "tessera/strategy_kit/param_checkpoint.hpp"
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
  if (rank == 0)
    save_param_index(writer, {"zero3", slots, params_of(layout_), weight_decay_flags(layout_)});
  const Tensor host_params = host_copy(params_);
  const Tensor host_state = host_copy(state_);
  const auto params = host_params.as<float>();
  const auto all_state = host_state.as<float>();
  std::vector<float> state;
  for (std::size_t u = 0; u < plan_.units.size(); ++u) {
    const auto& unit = plan_.units[u];
    const std::size_t k = u * static_cast<std::size_t>(world) + static_cast<std::size_t>(rank);
    const std::size_t length = shards[k].end - shards[k].begin;
    // Slot-major within the piece, as the format wants, from slot-major over all shards.
    state.resize(length * slots);
    for (std::size_t s = 0; s < slots; ++s) {
      std::copy_n(all_state.begin() +
                      static_cast<std::ptrdiff_t>(s * plan_.shard_total + unit.shard_offset),
                  length, state.begin() + static_cast<std::ptrdiff_t>(s * length));
    }
    save_flat_range(writer, layout_, shards[k].begin, shards[k].end,
                    params.subspan(unit.shard_offset, length), state, slots);
  }
}

void Zero3Strategy::load(const CheckpointReader& reader) {
  TESSERA_CHECK(pool_ != nullptr, "zero3: load before setup");
  const int rank = setup_.world->rank();
  const std::size_t slots = setup_.optimizer->state_per_param();
  // One read of the checkpoint for every unit: each unit's optimizer state lands slot-major in
  // its own buffer first, because state_ is slot-major over the whole shard.
  const Tensor host_params = host_copy(params_);
  const Tensor host_state = host_copy(state_);
  const auto params = host_params.as<float>();
  const auto all_state = host_state.as<float>();
  std::vector<std::vector<float>> states(plan_.units.size());
  std::vector<FlatRangeTarget> targets;
  for (std::size_t u = 0; u < plan_.units.size(); ++u) {
    const auto& unit = plan_.units[u];
    const std::size_t begin = unit.flat_begin + unit.owned_begin(rank);
    const std::size_t end = unit.flat_begin + unit.owned_end(rank);
    states[u].assign((end - begin) * slots, 0.0F);
    targets.push_back({begin, end, params.subspan(unit.shard_offset, end - begin), states[u]});
  }
  load_flat_ranges(reader, layout_, targets, slots);
  for (std::size_t u = 0; u < plan_.units.size(); ++u) {
    const auto& unit = plan_.units[u];
    const std::size_t length = targets[u].end - targets[u].begin;
    for (std::size_t s = 0; s < slots; ++s) {
      std::copy_n(states[u].begin() + static_cast<std::ptrdiff_t>(s * length), length,
                  all_state.begin() +
                      static_cast<std::ptrdiff_t>(s * plan_.shard_total + unit.shard_offset));
    }
  }
  copy_back(host_params, params_);
  copy_back(host_state, state_);
}

std::vector<float> Zero3Strategy::gather_parameters() {
  TESSERA_CHECK(pool_ != nullptr, "zero3: gather_parameters before setup");
  std::vector<float> flat(layout_.total, 0.0F);
  for (std::size_t u = 0; u < plan_.units.size(); ++u) {
    const auto& unit = plan_.units[u];
    float* base = wait_gathered(u);
    allocator_->copy(view_of(std::span<float>(flat).subspan(unit.flat_begin, unit.elements())),
                     {base, unit.elements(), DType::f32, allocator_->device()});
    release_gathered(u);
  }
  return flat;
}

}  // namespace tessera::zero3
