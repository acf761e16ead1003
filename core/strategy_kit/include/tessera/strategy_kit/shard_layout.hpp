#pragma once
// ShardLayout: how a sharded data-parallel strategy (zero1, zero2) pads the flat parameter
// vector (FlatLayout order) and cuts it among the ranks of its group.
//
// The padded vector is split into buckets, each reduced (reduce-scatter or all-reduce) and
// gathered as one collective. Every bucket is divided into `world` equal pieces; rank r owns
// piece r of every bucket, and its shard is the concatenation of its pieces in bucket order.
// So one reduce-scatter per bucket hands each rank exactly the part of that bucket it owns,
// and one all-gather per bucket returns the updated parameters, both while other buckets are
// still in flight.
//
// Every bucket boundary and every piece boundary is a multiple of kGradNormBlock: each rank
// then computes whole gradient-norm blocks and the global norm has the same bits as ddp's.

#include <cstddef>
#include <vector>

#include "tessera/strategy_kit/flat_state.hpp"

namespace tessera {

// Canonical (FlatLayout) element range [begin, end) of the padded vector.
struct ShardBucket {
  std::size_t begin = 0;
  std::size_t end = 0;
};

// Piece `rank` of bucket `bucket`: canonical elements [begin, end), stored at shard_offset in
// the owner's shard.
struct ShardPiece {
  std::size_t bucket = 0;
  int rank = 0;
  std::size_t begin = 0;
  std::size_t end = 0;
  std::size_t shard_offset = 0;
  [[nodiscard]] std::size_t size() const noexcept { return end - begin; }
};

// Immutable value; cheap to copy. Thread-safe to read.
class ShardLayout {
 public:
  ShardLayout() = default;

  // Buckets are planned from the end of the vector down (the order backward produces
  // gradients): the first holds about first_bucket_elements, later ones about
  // bucket_cap_elements, each rounded up to a multiple of world * kGradNormBlock; the last
  // (lowest) bucket takes what remains. `total` is padded up to that multiple. Throws
  // InvalidArgument for world < 1 or a zero bucket size.
  [[nodiscard]] static ShardLayout plan(std::size_t total, int world,
                                        std::size_t first_bucket_elements,
                                        std::size_t bucket_cap_elements);

  [[nodiscard]] int world() const noexcept { return world_; }
  [[nodiscard]] std::size_t total() const noexcept { return total_; }  // unpadded
  [[nodiscard]] std::size_t padded_total() const noexcept { return padded_total_; }
  [[nodiscard]] std::size_t shard_size() const noexcept { return padded_total_ / world(); }
  // Backward order: buckets()[0] holds the highest offsets.
  [[nodiscard]] const std::vector<ShardBucket>& buckets() const noexcept { return buckets_; }
  [[nodiscard]] ShardPiece piece(std::size_t bucket, int rank) const;
  // Rank's pieces in shard order (bucket order).
  [[nodiscard]] std::vector<ShardPiece> pieces_of(int rank) const;
  // Every piece as a checkpoint shard, index bucket * world + rank (flat/shards order).
  [[nodiscard]] std::vector<FlatShard> checkpoint_shards() const;
  // Index of the bucket holding canonical element `offset` (< padded_total).
  [[nodiscard]] std::size_t bucket_of(std::size_t offset) const;

 private:
  int world_ = 1;
  std::size_t total_ = 0;
  std::size_t padded_total_ = 0;
  std::vector<ShardBucket> buckets_;
};

}  // namespace tessera
