#pragma once
// Sharded checkpoints of format 1 (round one, read but no longer written): flat/* blobs written
// piece by piece by the rank that owned each piece, plus a manifest ("sharded/manifest", from
// rank 0) naming every piece's range and owner. SliceReader (param_checkpoint.hpp) reads them;
// this header is its check of the sharded manifest. docs/training.md has the format.

#include <cstddef>
#include <string>
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

  // Throws CheckpointError on malformed text.
  [[nodiscard]] static ShardedManifest parse(const std::string& text);
};

// Checks a sharded checkpoint's manifest against its shards before anything is loaded: the
// manifest parses, was written at the checkpoint's world size, lists the same pieces as
// flat/shards, its pieces tile [0, padded_total) without gap or overlap, every owner is a
// rank of that world and every piece's blobs are present. Throws CheckpointError saying what
// does not match. Returns false (and checks nothing) for a checkpoint without a sharded
// manifest, such as one written by ddp.
bool verify_sharded_checkpoint(const CheckpointReader& reader);

}  // namespace tessera
