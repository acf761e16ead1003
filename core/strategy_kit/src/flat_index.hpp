#pragma once
// The blobs of flat parameter state that flat_state.cpp writes and both it and
// sharded_checkpoint.cpp read back: flat/layout (the model's parameter layout) and flat/shards
// ("shards K state_per_param S", then one "k begin end" line per shard).

#include <cstddef>
#include <string>
#include <vector>

#include "tessera/plugin/checkpoint_io.hpp"
#include "tessera/strategy_kit/flat_state.hpp"

namespace tessera::checkpoint_detail {

[[nodiscard]] std::string text_of(const std::vector<std::byte>& bytes);

struct ShardIndex {
  std::vector<FlatShard> shards;
  std::size_t state_per_param = 0;
};

// flat/shards of `reader`. Throws CheckpointError when the checkpoint holds no flat state or the
// blob is malformed.
[[nodiscard]] ShardIndex read_shard_index(const CheckpointReader& reader);
// Throws CheckpointError unless flat/layout equals `expected` (the model being loaded into).
void check_layout(const CheckpointReader& reader, const FlatLayout& expected);

}  // namespace tessera::checkpoint_detail
