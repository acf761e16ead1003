// Checkpoints of the hybrid strategy: every parameter and optimizer-state slot as slices of the
// whole parameter (checkpoint_io.hpp), so any strategy on any mesh loads them.
#include <algorithm>

#include "hybrid_strategy.hpp"
#include "tessera/base/error.hpp"
#include "tessera/strategy_kit/memory_state.hpp"
#include "tessera/strategy_kit/param_checkpoint.hpp"

namespace tessera::hybrid {

namespace {

// The boxes a parameter (or its tensor-parallel slice) covers, all of their elements: one, or
// for a slice of several blocks (ParamSlice::blocks, the heads of Q, K and V) one per block,
// which the slice holds one after the other. `offset` is where a box starts in the slice.
struct Box {
  StateSlice slice;
  std::size_t offset = 0;
};

std::vector<Box> boxes_of(std::size_t layer, const ParamSpec& spec, std::size_t count) {
  const Shape& full = spec.full_shape();
  StateSlice slice;
  slice.layer = layer;
  slice.param = spec.name;
  slice.shape = full;
  if (spec.slice.whole()) {
    slice.dim = 0;
    slice.begin = 0;
    slice.end = full.empty() ? 1 : full[0];
    slice.last = count;
    return {{slice, 0}};
  }
  const ParamSlice& s = spec.slice;
  const SliceRuns runs = slice_runs(spec);
  // Blocks lie one after the other in the slice only when nothing varies before `dim`.
  TESSERA_CHECK(s.blocks == 1 || runs.count == s.blocks,
                spec.name + ": a slice of several blocks must cut its leading dimension");
  const std::size_t part = full[s.dim] / s.blocks;
  const std::size_t per_box = count / s.blocks;
  std::vector<Box> boxes;
  for (std::size_t b = 0; b < s.blocks; ++b) {
    slice.dim = s.dim;
    slice.begin = b * part + s.begin;
    slice.end = b * part + s.end;
    slice.last = per_box;
    boxes.push_back({slice, b * per_box});
  }
  return boxes;
}

}  // namespace

void HybridStrategy::save(CheckpointWriter& writer) {
  TESSERA_CHECK(groups_ != nullptr, "hybrid: save before setup");
  const std::size_t slots = setup_.optimizer->state_per_param();
  if (setup_.world->rank() == 0)
    save_param_index(writer, {"hybrid", slots, params_of(layout_), weight_decay_flags(layout_)});
  // Data-parallel replicas hold the same parameters: replica 0 writes them, and the optimizer
  // state too unless it is sharded over the data group (zero1), when each data rank writes its
  // shard. Of a replica, each stage writes its layers; a split parameter's slice comes from its
  // tensor rank, a replicated one from tensor rank 0.
  const bool writes_params = groups_->at.data == 0;
  if (!writes_params && !sharded()) return;
  const auto values = params_.as<float>();
  const auto state = state_.as<float>();
  const std::size_t begin = shard_begin();
  const std::size_t end = std::min(begin + shard_size_, local_count_);
  for (const auto& p : params_of_stage_) {
    // A copy of a tied parameter is written by the stage that owns it.
    if ((p.spec.slice.whole() && groups_->at.tensor != 0) || p.copy) continue;
    for (auto [slice, offset] : boxes_of(p.layer, p.spec, p.count)) {
      const std::size_t at = p.offset + offset;
      const std::size_t count = slice.elements();
      if (writes_params) writer.put_slice(slice, values.subspan(at, count));
      // The part of the box inside this rank's state shard, as elements of the box.
      const std::size_t lo = std::max(begin, at);
      const std::size_t hi = std::min(end, at + count);
      if (lo >= hi) continue;
      slice.kind = StateKind::optimizer_state;
      slice.first = lo - at;
      slice.last = hi - at;
      for (std::size_t s = 0; s < slots; ++s) {
        slice.slot = s;
        writer.put_slice(slice, state.subspan(s * shard_size_ + lo - begin, hi - lo));
      }
    }
  }
}

void HybridStrategy::load(const CheckpointReader& reader) {
  TESSERA_CHECK(groups_ != nullptr, "hybrid: load before setup");
  const std::size_t slots = setup_.optimizer->state_per_param();
  const SliceReader slices(reader, &layout_);
  slices.check_params(params_of(layout_));
  slices.check_state_slots(slots);
  const auto values = params_.as<float>();
  const auto state = state_.as<float>();
  const std::size_t begin = shard_begin();
  const std::size_t end = std::min(begin + shard_size_, local_count_);
  for (const auto& p : params_of_stage_) {
    const ParamId id{p.layer, p.spec.name, p.spec.full_shape()};
    for (const Box& b : boxes_of(p.layer, p.spec, p.count)) {
      const StateSlice& box = b.slice;
      const auto read = [&](StateKind kind, std::size_t slot, std::size_t first, std::size_t last,
                            std::span<float> into) {
        const auto part =
            slices.read_slice(id, kind, slot, box.dim, box.begin, box.end, first, last);
        TESSERA_CHECK(part.size() == into.size(),
                      "hybrid: slice of " + describe(id) + " read with the wrong size");
        std::copy(part.begin(), part.end(), into.begin());
      };
      const std::size_t at = p.offset + b.offset;
      const std::size_t count = box.elements();
      read(StateKind::parameter, 0, 0, count, values.subspan(at, count));
      const std::size_t lo = std::max(begin, at);
      const std::size_t hi = std::min(end, at + count);
      if (lo >= hi) continue;
      for (std::size_t s = 0; s < slots; ++s) {
        read(StateKind::optimizer_state, s, lo - at, hi - at,
             state.subspan(s * shard_size_ + lo - begin, hi - lo));
      }
    }
  }
}

std::vector<float> HybridStrategy::gather_parameters() {
  TESSERA_CHECK(groups_ != nullptr, "hybrid: gather_parameters before setup");
  const auto state = gather_state_in_memory(*this, *setup_.world);
  std::vector<float> whole(layout_.total);
  load_flat_range(*state, layout_, 0, layout_.total, whole, {},
                  setup_.optimizer->state_per_param());
  return whole;
}

}  // namespace tessera::hybrid
