#pragma once
// Each epoch's sample order, shuffled identically on every rank and split so that across ranks
// every sample is seen exactly once per epoch.
//
// The rule: the epoch's permutation is cut into global batches of world_size * batch_size
// samples; rank r takes the r-th block of batch_size samples of each. The last global batch,
// when shorter (R samples), is split as evenly as possible in rank order: rank r gets
// R / world_size samples, plus one if r < R % world_size. Nothing is dropped or padded, every
// rank runs the same number of steps, and a rank may get an empty last batch when
// R < world_size; strategies weight each rank's loss and gradient by its share of the global
// batch (global_batch_size()).
//
// A resumed epoch starts after the samples the world has already trained on: the rule above
// applies to the rest of the permutation, [consumed, n), so a run resumed at another world
// size (or by the elastic strategy after a membership change) sees every sample of the epoch
// exactly once, whatever world sizes the epoch's earlier steps ran at.

#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

namespace tessera {

struct EpochShardSpec {
  std::size_t dataset_size = 0;
  std::uint64_t epoch = 0;
  std::uint64_t seed = 0;
  int rank = 0;
  int world_size = 1;
  std::size_t batch_size = 1;  // per rank
  bool shuffle = true;         // false: samples in index order (evaluation)
  // Samples of this epoch's order the world has already trained on (a resumed epoch); the
  // shard deals out the rest. At most dataset_size.
  std::size_t consumed = 0;
};

class EpochShard {
 public:
  // Throws InvalidArgument for rank outside [0, world_size), a zero batch size or more
  // samples consumed than the data set has.
  explicit EpochShard(const EpochShardSpec& spec);

  // What rank `rank` of a world of `world_size` sees of the rest of an epoch whose order is
  // `order` (epoch_permutation(), or any other order every rank agrees on) once the first
  // `consumed` samples of it have been trained on. Throws as the constructor.
  [[nodiscard]] static EpochShard deal(std::span<const std::size_t> order, std::size_t consumed,
                                       int rank, int world_size, std::size_t batch_size);

  // ceil(dataset_size / (world_size * batch_size)), the same on every rank.
  [[nodiscard]] std::size_t steps() const noexcept { return global_sizes_.size(); }
  // This rank's sample indices for `step` (0-based); may be empty in the last step.
  [[nodiscard]] std::span<const std::size_t> batch(std::size_t step) const;
  // Samples in `step` over all ranks.
  [[nodiscard]] std::size_t global_batch_size(std::size_t step) const {
    return global_sizes_.at(step);
  }
  // Samples of `step` dealt to the ranks before this one: where its share starts in the step's
  // global batch (StepInfo::batch_offset).
  [[nodiscard]] std::size_t batch_offset(std::size_t step) const { return batch_offsets_.at(step); }
  // Every index this rank sees this epoch, in step order.
  [[nodiscard]] std::span<const std::size_t> indices() const noexcept { return indices_; }

 private:
  EpochShard() = default;
  std::vector<std::size_t> indices_;
  std::vector<std::size_t> offsets_;  // steps() + 1 offsets into indices_
  std::vector<std::size_t> global_sizes_;
  std::vector<std::size_t> batch_offsets_;
};

// The epoch's permutation of [0, n): a Fisher-Yates shuffle driven by counter_random(seed,
// epoch, i), so it is the same on every rank and platform.
[[nodiscard]] std::vector<std::size_t> epoch_permutation(std::size_t n, std::uint64_t seed,
                                                         std::uint64_t epoch);

}  // namespace tessera
