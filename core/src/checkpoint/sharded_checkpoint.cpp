#include "tessera/strategy_kit/sharded_checkpoint.hpp"

#include <algorithm>
#include <cstring>
#include <sstream>

#include "flat_index.hpp"
#include "tessera/base/error.hpp"

namespace tessera {

using checkpoint_detail::check_layout;
using checkpoint_detail::read_shard_index;
using checkpoint_detail::text_of;

namespace {

constexpr const char* kManifestBlob = "sharded/manifest";

std::vector<float> floats_of(const std::vector<std::byte>& bytes, const std::string& blob,
                             std::size_t expected) {
  if (bytes.size() != expected * sizeof(float)) {
    throw CheckpointError("checkpoint blob '" + blob + "' holds " + std::to_string(bytes.size()) +
                          " bytes, its shard needs " + std::to_string(expected * sizeof(float)));
  }
  std::vector<float> values(expected);
  std::memcpy(values.data(), bytes.data(), bytes.size());
  return values;
}

}  // namespace

std::string ShardedManifest::serialize() const {
  std::string text = "sharded 1 strategy " + strategy + " world " + std::to_string(world_size) +
                     " padded_total " + std::to_string(padded_total) + " state_per_param " +
                     std::to_string(state_per_param) + " pieces " + std::to_string(pieces.size()) +
                     "\n";
  for (std::size_t k = 0; k < pieces.size(); ++k) {
    text += "piece " + std::to_string(k) + " rank " + std::to_string(pieces[k].rank) + " " +
            std::to_string(pieces[k].range.begin) + " " + std::to_string(pieces[k].range.end) +
            "\n";
  }
  return text;
}

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

void save_sharded(CheckpointWriter& writer, const FlatLayout& layout,
                  const ShardedManifest& manifest, int rank, const PieceData& piece_data) {
  std::vector<FlatShard> shards;
  for (const auto& piece : manifest.pieces) shards.push_back(piece.range);
  if (rank == 0) {
    const std::string text = manifest.serialize();
    writer.put(kManifestBlob, std::as_bytes(std::span<const char>(text.data(), text.size())));
  }
  bool index_written = rank != 0;
  for (std::size_t k = 0; k < manifest.pieces.size(); ++k) {
    if (manifest.pieces[k].rank != rank) continue;
    const auto [params, state] = piece_data(k);
    save_flat_shard(writer, layout, shards, k, params, state, manifest.state_per_param,
                    !index_written);
    index_written = true;
  }
  TESSERA_CHECK(index_written, "save_sharded: rank 0 owns no piece, so no index was written");
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

void load_flat_ranges(const CheckpointReader& reader, const FlatLayout& expected,
                      std::span<const FlatRangeTarget> targets, std::size_t state_per_param) {
  const auto index = read_shard_index(reader);
  check_layout(reader, expected);
  const bool want_state = std::any_of(targets.begin(), targets.end(),
                                      [](const FlatRangeTarget& t) { return !t.state.empty(); });
  if (want_state && index.state_per_param != state_per_param) {
    throw CheckpointError(
        "checkpoint optimizer state has " + std::to_string(index.state_per_param) +
        " slots per parameter, the configured optimizer " + std::to_string(state_per_param) +
        ": was it written with another optimizer?");
  }
  for (const auto& t : targets) {
    TESSERA_CHECK(t.end >= t.begin && (t.params.empty() || t.params.size() == t.end - t.begin) &&
                      (t.state.empty() || t.state.size() == (t.end - t.begin) * state_per_param),
                  "load_flat_ranges: a target's buffers do not match its range");
  }
  std::vector<std::size_t> covered(targets.size(), 0);
  for (std::size_t k = 0; k < index.shards.size(); ++k) {
    const auto shard = index.shards[k];
    const std::size_t length = shard.end - shard.begin;
    const auto name = std::to_string(k);
    std::vector<float> params;
    std::vector<float> state;
    for (std::size_t i = 0; i < targets.size(); ++i) {
      const auto& t = targets[i];
      const std::size_t lo = std::max(t.begin, shard.begin);
      const std::size_t hi = std::min({t.end, shard.end, expected.total});
      if (lo >= hi) continue;
      const auto from = static_cast<std::ptrdiff_t>(lo - shard.begin);
      const auto to = static_cast<std::ptrdiff_t>(hi - shard.begin);
      if (!t.params.empty()) {
        if (params.empty())
          params = floats_of(reader.get("flat/params/" + name), "flat/params/" + name, length);
        std::copy(params.begin() + from, params.begin() + to,
                  t.params.begin() + static_cast<std::ptrdiff_t>(lo - t.begin));
      }
      if (!t.state.empty()) {
        if (state.empty()) {
          state = floats_of(reader.get("flat/optimizer_state/" + name),
                            "flat/optimizer_state/" + name, length * state_per_param);
        }
        const std::size_t target_length = t.end - t.begin;
        for (std::size_t s = 0; s < state_per_param; ++s) {
          const auto slot = static_cast<std::ptrdiff_t>(s * length);
          std::copy(
              state.begin() + slot + from, state.begin() + slot + to,
              t.state.begin() + static_cast<std::ptrdiff_t>(s * target_length + lo - t.begin));
        }
      }
      covered[i] += hi - lo;
    }
  }
  for (std::size_t i = 0; i < targets.size(); ++i) {
    const auto& t = targets[i];
    const std::size_t want_end = std::min(t.end, expected.total);
    if (covered[i] != (want_end > t.begin ? want_end - t.begin : 0)) {
      throw CheckpointError("checkpoint shards do not cover elements [" + std::to_string(t.begin) +
                            ", " + std::to_string(want_end) + ")");
    }
  }
}

}  // namespace tessera
