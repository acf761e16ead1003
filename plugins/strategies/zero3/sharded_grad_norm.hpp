#pragma once
// ShardedGradNorm: the global gradient norm over zero3's unit shards, bitwise equal to the
// GradientSynchronizer's (ddp's) norm over the full flat gradient.

#include <cstddef>
#include <span>
#include <vector>

#include "tessera/base/device_allocator.hpp"
#include "tessera/plugin/communicator.hpp"
#include "unit_plan.hpp"

namespace tessera::zero3 {

// ddp sums squares block by block (kGradNormBlock elements of the flat gradient, each block in
// element order from 0.0) and then the blocks in order. Partial sums of a block cut between
// ranks would round differently, so such a block is summed whole on every rank from an
// all-gather of its pieces (a few per unit, at most kGradNormBlock elements each), and every
// other block by its only owner; an all-reduce (sum) of the block vector, where each entry has
// exactly one non-zero contributor, then gives every rank every block's exact bits.
//
// Collective: compute() issues an all-gather and an all-reduce on `group`, on every rank.
class ShardedGradNorm {
 public:
  ShardedGradNorm(const UnitPlan& plan, int rank, int world);

  // The sum of squares of the averaged gradient, as GradientSynchronizer::clip_grad_norm
  // computes it. `shards` is this rank's gradient shard storage (UnitPlan layout) in host
  // memory. A group that moves device memory only (nccl) exchanges through `memory`, the
  // allocator of its device (null for a group that moves host memory).
  [[nodiscard]] double sum_of_squares(std::span<const float> shards, Communicator& group,
                                      DeviceAllocator* memory, Duration timeout);

  [[nodiscard]] std::size_t buffer_bytes() const noexcept;

 private:
  // A run of this rank's real gradient elements: flat [flat_begin, +count) at shard_offset.
  struct Run {
    std::size_t flat_begin = 0;
    std::size_t count = 0;
    std::size_t shard_offset = 0;
  };
  // A piece of a block cut between ranks: flat [flat_begin, +count), found in the gathered
  // fragments at rank * fragment_elements_ + fragment_offset.
  struct Piece {
    std::size_t flat_begin = 0;
    std::size_t count = 0;
    int rank = 0;
    std::size_t fragment_offset = 0;
  };

  std::vector<Run> runs_;              // this rank's, in flat order
  std::vector<bool> shared_block_;     // per block: cut between ranks
  std::vector<Piece> pieces_;          // every rank's pieces of shared blocks, in flat order
  std::vector<Run> my_pieces_;         // this rank's pieces, in fragment order
  std::size_t fragment_elements_ = 0;  // the largest rank's fragment
  std::vector<float> fragment_;
  std::vector<float> gathered_;
  std::vector<double> blocks_;
};

}  // namespace tessera::zero3
