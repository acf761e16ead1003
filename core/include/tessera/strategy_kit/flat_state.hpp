#pragma once
// The canonical flat layout of a model's parameters and how strategies put it in checkpoints.
// Every data-parallel strategy (ddp, zero1/2/3) stores parameters as one flat fp32 vector in
// ParamSpec order, cut into contiguous shards; a checkpoint records the layout and the shard
// ranges, so a checkpoint written by any of them at any world size loads into any other.

#include <cstddef>
#include <span>
#include <string>
#include <vector>

#include "tessera/plugin/model.hpp"
#include "tessera/plugin/strategy.hpp"

namespace tessera {

struct FlatParam {
  std::string name;  // "<layer index>.<layer name>.<param name>"
  Shape shape;
  std::size_t offset = 0;  // elements from the start of the flat vector
  std::size_t count = 0;
  std::size_t layer = 0;
};

struct FlatLayout {
  std::vector<FlatParam> params;
  std::size_t total = 0;  // unpadded element count

  // Every parameter of every layer, in order. Throws InvalidArgument for a non-f32 parameter.
  [[nodiscard]] static FlatLayout of(const Model& model);
  [[nodiscard]] std::string serialize() const;
  // Throws CheckpointError on malformed text.
  [[nodiscard]] static FlatLayout parse(const std::string& text);
  friend bool operator==(const FlatLayout&, const FlatLayout&);
};

// One shard of the flat vector, [begin, end); end may pass layout.total (padding).
struct FlatShard {
  std::size_t begin = 0;
  std::size_t end = 0;
};

// Checkpoint blobs (docs/training.md): "flat/layout" and "flat/shards" (written by rank 0),
// "flat/params/<k>" and "flat/optimizer_state/<k>" (the shard's owner; optimizer state
// slot-major within the shard: slot s of element j at s * (end - begin) + j).
//
// Writes shard k's blobs; rank 0 additionally passes write_index = true with all shards.
void save_flat_shard(CheckpointWriter& writer, const FlatLayout& layout,
                     std::span<const FlatShard> shards, std::size_t k,
                     std::span<const float> params, std::span<const float> state,
                     std::size_t state_per_param, bool write_index);

// Reads elements [begin, end) (clamped to layout.total; the rest left as is) of the
// parameters, and of each optimizer-state slot, from whichever shards hold them, whatever the
// world size the checkpoint was written at. `state` is slot-major over [begin, end) and may be
// empty to skip optimizer state. Throws CheckpointError if the checkpoint's layout differs
// from `expected` or its optimizer has another number of state slots.
void load_flat_range(const CheckpointReader& reader, const FlatLayout& expected, std::size_t begin,
                     std::size_t end, std::span<float> params, std::span<float> state,
                     std::size_t state_per_param);

}  // namespace tessera
