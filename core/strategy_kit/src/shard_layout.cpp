#include "tessera/strategy_kit/shard_layout.hpp"

#include <algorithm>

#include "tessera/base/error.hpp"
#include "tessera/strategy_kit/gradient_sync.hpp"

namespace tessera {

namespace {

std::size_t round_up(std::size_t value, std::size_t multiple) {
  return (value + multiple - 1) / multiple * multiple;
}

}  // namespace

ShardLayout ShardLayout::plan(std::size_t total, int world, std::size_t first_bucket_elements,
                              std::size_t bucket_cap_elements) {
  TESSERA_CHECK(world >= 1, "ShardLayout: world size must be at least 1");
  TESSERA_CHECK(first_bucket_elements > 0 && bucket_cap_elements > 0,
                "ShardLayout: bucket sizes must be positive");
  ShardLayout layout;
  layout.world_ = world;
  layout.total_ = total;
  const std::size_t unit = kGradNormBlock * static_cast<std::size_t>(world);
  layout.padded_total_ = round_up(std::max<std::size_t>(total, 1), unit);
  std::size_t end = layout.padded_total_;
  while (end > 0) {
    const std::size_t want = layout.buckets_.empty() ? first_bucket_elements : bucket_cap_elements;
    const std::size_t size = std::min(end, round_up(want, unit));
    layout.buckets_.push_back({end - size, end});
    end -= size;
  }
  return layout;
}

ShardPiece ShardLayout::piece(std::size_t bucket, int rank) const {
  TESSERA_CHECK(
      bucket < buckets_.size() && rank >= 0 && rank < world_,
      "ShardLayout::piece: no bucket " + std::to_string(bucket) + " rank " + std::to_string(rank));
  // Every bucket holds a multiple of world pieces' worth, so the shard offset of bucket b is
  // the sum of the earlier buckets' piece sizes.
  std::size_t shard_offset = 0;
  for (std::size_t b = 0; b < bucket; ++b) {
    shard_offset += (buckets_[b].end - buckets_[b].begin) / static_cast<std::size_t>(world_);
  }
  const auto& range = buckets_[bucket];
  const std::size_t size = (range.end - range.begin) / static_cast<std::size_t>(world_);
  const std::size_t begin = range.begin + static_cast<std::size_t>(rank) * size;
  return {bucket, rank, begin, begin + size, shard_offset};
}

std::vector<ShardPiece> ShardLayout::pieces_of(int rank) const {
  std::vector<ShardPiece> pieces;
  for (std::size_t b = 0; b < buckets_.size(); ++b) pieces.push_back(piece(b, rank));
  return pieces;
}

std::vector<FlatShard> ShardLayout::checkpoint_shards() const {
  std::vector<FlatShard> shards;
  for (std::size_t b = 0; b < buckets_.size(); ++b) {
    for (int r = 0; r < world_; ++r) {
      const auto p = piece(b, r);
      shards.push_back({p.begin, p.end});
    }
  }
  return shards;
}

std::size_t ShardLayout::bucket_of(std::size_t offset) const {
  TESSERA_CHECK(offset < padded_total_, "ShardLayout::bucket_of: offset past the padded end");
  // Buckets descend, so the first whose begin is <= offset holds it.
  for (std::size_t b = 0; b < buckets_.size(); ++b) {
    if (buckets_[b].begin <= offset) return b;
  }
  return buckets_.size() - 1;
}

}  // namespace tessera
