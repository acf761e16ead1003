#include "tessera/strategy_kit/sharded_checkpoint.hpp"

#include <algorithm>
#include <cstring>
#include <sstream>

#include "flat_index.hpp"
#include "tessera/base/error.hpp"

namespace tessera {

using checkpoint_detail::read_shard_index;
using checkpoint_detail::text_of;

namespace {

constexpr const char* kManifestBlob = "sharded/manifest";

}  // namespace

ShardedManifest ShardedManifest::parse(const std::string& text) {
  ShardedManifest manifest;
  std::istringstream in(text);
  std::string magic;
  std::string version;
  std::string w[5];
  std::size_t count = 0;
  if (!(in >> magic >> version >> w[0] >> manifest.strategy >> w[1] >> manifest.world_size >>
        w[2] >> manifest.padded_total >> w[3] >> manifest.state_per_param >> w[4] >> count) ||
      magic != "sharded" || version != "1" || w[0] != "strategy" || w[1] != "world" ||
      w[2] != "padded_total" || w[3] != "state_per_param" || w[4] != "pieces") {
    throw CheckpointError("checkpoint blob 'sharded/manifest' is malformed in its first line");
  }
  for (std::size_t k = 0; k < count; ++k) {
    std::string piece_word;
    std::string rank_word;
    std::size_t id = 0;
    Piece piece;
    if (!(in >> piece_word >> id >> rank_word >> piece.rank >> piece.range.begin >>
          piece.range.end) ||
        piece_word != "piece" || rank_word != "rank" || id != k ||
        piece.range.end < piece.range.begin) {
      throw CheckpointError("checkpoint blob 'sharded/manifest' is malformed at piece " +
                            std::to_string(k));
    }
    manifest.pieces.push_back(piece);
  }
  return manifest;
}

bool verify_sharded_checkpoint(const CheckpointReader& reader) {
  if (!reader.contains(kManifestBlob)) return false;
  const auto manifest = ShardedManifest::parse(text_of(reader.get(kManifestBlob)));
  const auto where = std::string("sharded checkpoint manifest (") + manifest.strategy + ", " +
                     std::to_string(manifest.world_size) + " ranks): ";
  if (manifest.world_size != reader.saved_world_size()) {
    throw CheckpointError(where + "the checkpoint was written by " +
                          std::to_string(reader.saved_world_size()) + " ranks");
  }
  const auto index = read_shard_index(reader);
  if (index.shards.size() != manifest.pieces.size() ||
      index.state_per_param != manifest.state_per_param) {
    throw CheckpointError(where + "lists " + std::to_string(manifest.pieces.size()) +
                          " pieces, flat/shards " + std::to_string(index.shards.size()));
  }
  std::vector<FlatShard> sorted;
  for (std::size_t k = 0; k < manifest.pieces.size(); ++k) {
    const auto& piece = manifest.pieces[k];
    const auto name = std::to_string(k);
    if (piece.range.begin != index.shards[k].begin || piece.range.end != index.shards[k].end) {
      throw CheckpointError(where + "piece " + name + " differs from flat/shards");
    }
    if (piece.rank < 0 || piece.rank >= manifest.world_size) {
      throw CheckpointError(where + "piece " + name + " names rank " + std::to_string(piece.rank));
    }
    if (!reader.contains("flat/params/" + name) ||
        !reader.contains("flat/optimizer_state/" + name)) {
      throw CheckpointError(where + "the blobs of piece " + name + " (rank " +
                            std::to_string(piece.rank) + ") are missing");
    }
    sorted.push_back(piece.range);
  }
  std::sort(sorted.begin(), sorted.end(),
            [](const FlatShard& a, const FlatShard& b) { return a.begin < b.begin; });
  std::size_t next = 0;
  for (const auto& range : sorted) {
    if (range.begin != next) {
      throw CheckpointError(where + "pieces leave a gap or overlap at element " +
                            std::to_string(std::min(range.begin, next)));
    }
    next = range.end;
  }
  if (next != manifest.padded_total) {
    throw CheckpointError(where + "pieces end at element " + std::to_string(next) +
                          ", padded_total is " + std::to_string(manifest.padded_total));
  }
  return true;
}

}  // namespace tessera
