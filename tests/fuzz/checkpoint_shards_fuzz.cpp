// Fuzz target: the blobs a strategy loads from a checkpoint (flat/layout, flat/shards,
// sharded/manifest, flat/params/<k>, flat/optimizer_state/<k>), given as a container of
// "@@ NAME" sections (fuzz_support.hpp). verify_sharded_checkpoint, load_flat_range and
// load_flat_ranges must refuse what does not add up with a CheckpointError and never read or
// write outside their buffers.

#include <cstddef>
#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "fuzz_support.hpp"
#include "tessera/base/error.hpp"
#include "tessera/strategy_kit/flat_state.hpp"
#include "tessera/strategy_kit/sharded_checkpoint.hpp"

namespace {

class MemoryReader final : public tessera::CheckpointReader {
 public:
  explicit MemoryReader(std::map<std::string, std::string> blobs) : blobs_(std::move(blobs)) {}
  [[nodiscard]] std::vector<std::byte> get(const std::string& name) const override {
    const auto found = blobs_.find(name);
    if (found == blobs_.end()) throw tessera::CheckpointError("no blob '" + name + "'");
    const auto* bytes = reinterpret_cast<const std::byte*>(found->second.data());
    return {bytes, bytes + found->second.size()};
  }
  [[nodiscard]] bool contains(const std::string& name) const override {
    return blobs_.contains(name);
  }
  [[nodiscard]] int saved_world_size() const override { return 2; }

 private:
  std::map<std::string, std::string> blobs_;
};

// Targets larger than this are not loaded: the fuzzer would only measure the allocator.
constexpr std::size_t kMaxElements = 1 << 16;
constexpr std::size_t kMaxSlots = 4;

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const MemoryReader reader(tessera::fuzz::split_blobs(tessera::fuzz::as_text(data, size)));
  try {
    (void)tessera::verify_sharded_checkpoint(reader);
  } catch (const tessera::CheckpointError&) {
  }
  tessera::FlatLayout layout;
  try {
    const auto text = reader.get("flat/layout");
    layout = tessera::FlatLayout::parse(
        std::string(reinterpret_cast<const char*>(text.data()), text.size()));
  } catch (const tessera::CheckpointError&) {
    return 0;
  }
  if (layout.total > kMaxElements) return 0;
  for (std::size_t slots = 0; slots <= 2; ++slots) {
    // Two halves, so ranges that start inside a shard are read as well.
    const std::size_t half = layout.total / 2;
    std::vector<float> params(layout.total);
    std::vector<float> state(layout.total * slots);
    try {
      tessera::load_flat_range(reader, layout, half, layout.total, std::span(params).subspan(half),
                               std::span(state).first((layout.total - half) * slots), slots);
    } catch (const tessera::CheckpointError&) {
    }
    try {
      const tessera::FlatRangeTarget targets[] = {
          {0, half, std::span(params).first(half), std::span(state).first(half * slots)},
          {half, layout.total, std::span(params).subspan(half),
           std::span(state).subspan(half * slots)}};
      tessera::load_flat_ranges(reader, layout, targets, slots);
    } catch (const tessera::CheckpointError&) {
    }
  }
  static_assert(kMaxSlots >= 2);
  return 0;
}
