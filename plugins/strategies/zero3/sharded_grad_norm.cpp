#include "sharded_grad_norm.hpp"

#include <algorithm>

#include "tessera/strategy_kit/gradient_sync.hpp"
#include "tessera/strategy_kit/host_values.hpp"

namespace tessera::zero3 {

namespace {

struct Segment {
  std::size_t flat_begin = 0;
  std::size_t count = 0;
  int rank = 0;
  std::size_t shard_offset = 0;
};

}  // namespace

ShardedGradNorm::ShardedGradNorm(const UnitPlan& plan, int rank, int world) {
  // Every rank's real elements, in flat order: they partition the flat vector.
  std::vector<Segment> segments;
  std::size_t total = 0;
  for (const auto& unit : plan.units) {
    for (int q = 0; q < world; ++q) {
      const std::size_t begin = unit.owned_begin(q);
      const std::size_t end = unit.owned_end(q);
      if (end > begin)
        segments.push_back({unit.flat_begin + begin, end - begin, q, unit.shard_offset});
    }
    total = std::max(total, unit.flat_end);
  }
  const std::size_t block_count = (total + kGradNormBlock - 1) / kGradNormBlock;
  std::vector<int> block_owner(block_count, -1);
  shared_block_.assign(block_count, false);
  for (const auto& s : segments) {
    if (s.rank == rank) runs_.push_back({s.flat_begin, s.count, s.shard_offset});
    for (std::size_t b = s.flat_begin / kGradNormBlock;
         b <= (s.flat_begin + s.count - 1) / kGradNormBlock; ++b) {
      if (block_owner[b] >= 0 && block_owner[b] != s.rank) shared_block_[b] = true;
      block_owner[b] = s.rank;
    }
  }
  std::vector<std::size_t> fragment_size(static_cast<std::size_t>(world), 0);
  for (const auto& s : segments) {
    // Cut the segment at block edges and keep the parts that lie in shared blocks.
    for (std::size_t at = s.flat_begin; at < s.flat_begin + s.count;) {
      const std::size_t block = at / kGradNormBlock;
      const std::size_t end = std::min(s.flat_begin + s.count, (block + 1) * kGradNormBlock);
      if (shared_block_[block]) {
        auto& offset = fragment_size[static_cast<std::size_t>(s.rank)];
        pieces_.push_back({at, end - at, s.rank, offset});
        if (s.rank == rank)
          my_pieces_.push_back({at, end - at, s.shard_offset + at - s.flat_begin});
        offset += end - at;
      }
      at = end;
    }
  }
  fragment_elements_ = *std::max_element(fragment_size.begin(), fragment_size.end());
  fragment_.assign(fragment_elements_, 0.0F);
  gathered_.assign(fragment_elements_ * static_cast<std::size_t>(world), 0.0F);
  blocks_.assign(block_count, 0.0);
}

double ShardedGradNorm::sum_of_squares(std::span<const float> shards, Communicator& group,
                                       DeviceAllocator* memory, Duration timeout) {
  std::fill(blocks_.begin(), blocks_.end(), 0.0);
  for (const auto& run : runs_) {
    accumulate_norm_blocks(shards.subspan(run.shard_offset, run.count), run.flat_begin, blocks_);
  }
  for (std::size_t b = 0; b < blocks_.size(); ++b) {
    if (shared_block_[b]) blocks_[b] = 0.0;
  }
  if (group.size() == 1) return sum_norm_blocks(blocks_);

  std::size_t at = 0;
  for (const auto& piece : my_pieces_) {
    std::copy_n(shards.begin() + static_cast<std::ptrdiff_t>(piece.shard_offset), piece.count,
                fragment_.begin() + static_cast<std::ptrdiff_t>(at));
    at += piece.count;
  }
  const auto fragment = view_of(std::span<float>(fragment_));
  const auto gathered = view_of(std::span<float>(gathered_));
  const auto blocks = view_of(std::span<double>(blocks_));
  if (group.moves(Device::cpu())) {
    std::shared_ptr<Work> gather;
    if (fragment_elements_ > 0) gather = group.all_gather(fragment, gathered);
    auto reduce = group.all_reduce(blocks, ReduceOp::sum);
    if (gather) gather->wait(timeout);
    reduce->wait(timeout);
  } else {
    // Through device buffers, one after the other.
    if (fragment_elements_ > 0) all_gather_host(group, memory, fragment, gathered);
    all_reduce_host(group, memory, blocks, ReduceOp::sum);
  }

  std::vector<double> shared(blocks_.size(), 0.0);
  for (const auto& piece : pieces_) {
    const std::size_t offset =
        static_cast<std::size_t>(piece.rank) * fragment_elements_ + piece.fragment_offset;
    accumulate_norm_blocks(std::span<const float>(gathered_).subspan(offset, piece.count),
                           piece.flat_begin, shared);
  }
  for (std::size_t b = 0; b < blocks_.size(); ++b) {
    if (shared_block_[b]) blocks_[b] = shared[b];
  }
  return sum_norm_blocks(blocks_);
}

std::size_t ShardedGradNorm::buffer_bytes() const noexcept {
  return (fragment_.size() + gathered_.size()) * sizeof(float) + blocks_.size() * sizeof(double);
}

}  // namespace tessera::zero3
