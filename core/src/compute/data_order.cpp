#include "tessera/data_order.hpp"

#include <algorithm>
#include <numeric>
#include <string>
#include <utility>

#include "tessera/error.hpp"
#include "tessera/random.hpp"

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
  TESSERA_CHECK(
      spec.world_size >= 1 && spec.rank >= 0 && spec.rank < spec.world_size,
      "rank " + std::to_string(spec.rank) + " outside world of " + std::to_string(spec.world_size));
  TESSERA_CHECK(spec.batch_size >= 1, "batch size must be at least 1");
  const std::vector<std::size_t> order =
      spec.shuffle ? epoch_permutation(spec.dataset_size, spec.seed, spec.epoch) : [&] {
        std::vector<std::size_t> o(spec.dataset_size);
        std::iota(o.begin(), o.end(), std::size_t{0});
        return o;
      }();
  const auto world = static_cast<std::size_t>(spec.world_size);
  const auto rank = static_cast<std::size_t>(spec.rank);
  const std::size_t global = world * spec.batch_size;
  offsets_.push_back(0);
  for (std::size_t begin = 0; begin < order.size(); begin += global) {
    const std::size_t size = std::min(global, order.size() - begin);
    std::size_t mine_begin = rank * spec.batch_size;
    std::size_t mine_size = spec.batch_size;
    if (size < global) {
      const std::size_t base = size / world;
      const std::size_t extra = size % world;
      mine_begin = rank * base + std::min(rank, extra);
      mine_size = base + (rank < extra ? 1 : 0);
    }
    indices_.insert(indices_.end(), order.begin() + static_cast<std::ptrdiff_t>(begin + mine_begin),
                    order.begin() + static_cast<std::ptrdiff_t>(begin + mine_begin + mine_size));
    offsets_.push_back(indices_.size());
    global_sizes_.push_back(size);
  }
}

std::span<const std::size_t> EpochShard::batch(std::size_t step) const {
  TESSERA_CHECK(step < steps(), "step " + std::to_string(step) + " of " + std::to_string(steps()));
  return std::span<const std::size_t>(indices_).subspan(offsets_[step],
                                                        offsets_[step + 1] - offsets_[step]);
}

}  // namespace tessera
