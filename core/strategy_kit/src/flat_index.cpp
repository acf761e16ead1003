#include "flat_index.hpp"

#include <sstream>

#include "tessera/base/error.hpp"

namespace tessera::checkpoint_detail {

std::string text_of(const std::vector<std::byte>& bytes) {
  return {reinterpret_cast<const char*>(bytes.data()), bytes.size()};
}

ShardIndex read_shard_index(const CheckpointReader& reader) {
  if (!reader.contains("flat/layout") || !reader.contains("flat/shards")) {
    throw CheckpointError("checkpoint holds no flat parameter state (flat/layout, flat/shards)");
  }
  ShardIndex index;
  std::istringstream in(text_of(reader.get("flat/shards")));
  std::string word;
  std::string slots;
  std::size_t count = 0;
  if (!(in >> word >> count) || word != "shards" || !(in >> slots >> index.state_per_param) ||
      slots != "state_per_param") {
    throw CheckpointError("checkpoint blob 'flat/shards' is malformed");
  }
  for (std::size_t k = 0; k < count; ++k) {
    std::size_t id = 0;
    FlatShard shard;
    if (!(in >> id >> shard.begin >> shard.end) || id != k || shard.end < shard.begin) {
      throw CheckpointError("checkpoint blob 'flat/shards' is malformed at shard " +
                            std::to_string(k));
    }
    index.shards.push_back(shard);
  }
  return index;
}

void check_layout(const CheckpointReader& reader, const FlatLayout& expected) {
  if (!(FlatLayout::parse(text_of(reader.get("flat/layout"))) == expected)) {
    throw CheckpointError("checkpoint was written for another model: its parameter layout differs");
  }
}

}  // namespace tessera::checkpoint_detail
