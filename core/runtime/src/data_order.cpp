#include "tessera/runtime/data_order.hpp"

#include <algorithm>
#include <numeric>
#include <string>
#include <utility>

#include "tessera/base/error.hpp"
#include "tessera/base/random.hpp"

namespace tessera {

std::vector<std::size_t> epoch_permutation(std::size_t n, std::uint64_t seed, std::uint64_t epoch) {
  std::vector<std::size_t> order(n);
  std::iota(order.begin(), order.end(), std::size_t{0});
  for (std::size_t i = n; i > 1; --i) {
    // The modulo bias is below i / 2^64: irrelevant for any data set that fits in memory.
    const auto j = static_cast<std::size_t>(counter_random(seed, epoch, i) % i);
    std::swap(order[i - 1], order[j]);
  }
  return order;
}

EpochShard::EpochShard(const EpochShardSpec& spec) {
  std::vector<std::size_t> order;
  if (spec.shuffle) {
    order = epoch_permutation(spec.dataset_size, spec.seed, spec.epoch);
  } else {
    order.resize(spec.dataset_size);
    std::iota(order.begin(), order.end(), std::size_t{0});
  }
  *this = deal(order, spec.consumed, spec.rank, spec.world_size, spec.batch_size);
}

EpochShard EpochShard::deal(std::span<const std::size_t> order, std::size_t consumed, int rank,
                            int world_size, std::size_t batch_size) {
  TESSERA_CHECK(world_size >= 1 && rank >= 0 && rank < world_size,
                "rank " + std::to_string(rank) + " outside world of " + std::to_string(world_size));
  TESSERA_CHECK(batch_size >= 1, "batch size must be at least 1");
  TESSERA_CHECK(consumed <= order.size(), std::to_string(consumed) +
                                              " samples consumed of an epoch of " +
                                              std::to_string(order.size()));
  EpochShard shard;
  const auto world = static_cast<std::size_t>(world_size);
  const auto me = static_cast<std::size_t>(rank);
  const std::size_t global = world * batch_size;
  shard.offsets_.push_back(0);
  for (std::size_t begin = consumed; begin < order.size(); begin += global) {
    const std::size_t size = std::min(global, order.size() - begin);
    std::size_t mine_begin = me * batch_size;
    std::size_t mine_size = batch_size;
    if (size < global) {
      const std::size_t base = size / world;
      const std::size_t extra = size % world;
      mine_begin = me * base + std::min(me, extra);
      mine_size = base + (me < extra ? 1 : 0);
    }
    const auto first = order.begin() + static_cast<std::ptrdiff_t>(begin + mine_begin);
    shard.indices_.insert(shard.indices_.end(), first,
                          first + static_cast<std::ptrdiff_t>(mine_size));
    shard.offsets_.push_back(shard.indices_.size());
    shard.global_sizes_.push_back(size);
    shard.batch_offsets_.push_back(mine_begin);
  }
  return shard;
}

std::span<const std::size_t> EpochShard::batch(std::size_t step) const {
  TESSERA_CHECK(step < steps(), "step " + std::to_string(step) + " of " + std::to_string(steps()));
  return std::span<const std::size_t>(indices_).subspan(offsets_[step],
                                                        offsets_[step + 1] - offsets_[step]);
}

}  // namespace tessera
