#pragma once
// Sharded checkpoints: the flat/* blobs of flat_state.hpp written piece by piece by the rank
// that owns each piece, plus a manifest ("sharded/manifest", from rank 0) that names every
// piece's range and owner. Any data-parallel strategy at any world size reads them back with
// load_flat_ranges(), which is how a checkpoint reshards on load. docs/training.md has the
// format.

#include <cstddef>
#include <functional>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "tessera/plugin/strategy.hpp"
#include "tessera/strategy_kit/flat_state.hpp"

namespace tessera {

struct ShardedManifest {
  struct Piece {
    int rank = 0;
    FlatShard range;  // canonical elements; may pass the layout's total (padding)
  };
  std::string strategy;  // who wrote it (informational)
  int world_size = 1;
  std::size_t padded_total = 0;
  std::size_t state_per_param = 0;
  std::vector<Piece> pieces;  // index k is checkpoint shard k (flat/params/<k>)

  [[nodiscard]] std::string serialize() const;
  // Throws CheckpointError on malformed text.
  [[nodiscard]] static ShardedManifest parse(const std::string& text);
};

// Parameters and optimizer state (slot-major within the piece) of checkpoint piece k, as the
// owning rank holds them; the spans must stay valid until the next call.
using PieceData =
    std::function<std::pair<std::span<const float>, std::span<const float>>(std::size_t k)>;

// Writes the pieces manifest.pieces[k].rank == rank owns; rank 0 also writes flat/layout,
// flat/shards and sharded/manifest. Call from the strategy's save() on every rank.
void save_sharded(CheckpointWriter& writer, const FlatLayout& layout,
                  const ShardedManifest& manifest, int rank, const PieceData& piece_data);

// Checks a sharded checkpoint's manifest against its shards before anything is loaded: the
// manifest parses, was written at the checkpoint's world size, lists the same pieces as
// flat/shards, its pieces tile [0, padded_total) without gap or overlap, every owner is a
// rank of that world and every piece's blobs are present. Throws CheckpointError saying what
// does not match. Returns false (and checks nothing) for a checkpoint without a sharded
// manifest, such as one written by ddp.
bool verify_sharded_checkpoint(const CheckpointReader& reader);

// One destination of load_flat_ranges: canonical elements [begin, end) into `params` (size
// end - begin, or empty to skip parameters) and optimizer state into `state` (slot-major over
// [begin, end), or empty to skip).
struct FlatRangeTarget {
  std::size_t begin = 0;
  std::size_t end = 0;
  std::span<float> params;
  std::span<float> state;
};

// Fills every target from whichever checkpoint shards hold its elements, whatever world size
// and sharding wrote them, reading each shard's blobs at most once. Elements past the
// layout's total (padding) are left as they are. Throws CheckpointError if the layout differs
// from `expected`, the optimizer-state slot count differs, a blob has the wrong size or the
// shards do not cover a target.
void load_flat_ranges(const CheckpointReader& reader, const FlatLayout& expected,
                      std::span<const FlatRangeTarget> targets, std::size_t state_per_param);

}  // namespace tessera
