// Fuzz target: the blobs a strategy loads from a checkpoint, given as a container of "@@ NAME"
// sections (fuzz_support.hpp), in either format. Format 2: "parameters" (the parameter index)
// and slices, each a section "slices/<anything>" holding its JSON description on the first line
// and its values' bytes after it. Format 1: flat/layout, flat/shards, sharded/manifest,
// flat/params/<k>, flat/optimizer_state/<k>. SliceReader (construction, verify, read_slice),
// verify_sharded_checkpoint, load_flat_range and load_flat_ranges must refuse what does not add
// up with a CheckpointError and never read or write outside their buffers.

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <map>
#include <string>
#include <vector>

#include "fuzz_support.hpp"
#include "json_fields.hpp"
#include "tessera/base/error.hpp"
#include "tessera/strategy_kit/flat_state.hpp"
#include "tessera/strategy_kit/param_checkpoint.hpp"
#include "tessera/strategy_kit/sharded_checkpoint.hpp"

namespace {

class MemoryReader final : public tessera::CheckpointReader {
 public:
  explicit MemoryReader(std::map<std::string, std::string> blobs) : blobs_(std::move(blobs)) {
    // Descriptions that do not parse are left out, as the manifest's checks would refuse them.
    for (const auto& [name, body] : blobs_) {
      if (name.rfind("slices/", 0) != 0) continue;
      const auto line_end = body.find('\n');
      if (line_end == std::string::npos) continue;
      try {
        const auto j = tessera::checkpoint::parse_json(body.substr(0, line_end), name);
        slices_.push_back(tessera::checkpoint::slice_from_json(j, name));
      } catch (const tessera::CheckpointError& e) {
        tessera::fuzz::require_own_words(e);
        continue;
      }
      const auto bytes = body.substr(line_end + 1);
      std::vector<float> values(bytes.size() / sizeof(float));
      if (!values.empty()) std::memcpy(values.data(), bytes.data(), values.size() * sizeof(float));
      values_.push_back(std::move(values));
    }
  }
  [[nodiscard]] std::vector<std::byte> get(const std::string& name) const override {
    const auto found = blobs_.find(name);
    if (found == blobs_.end()) throw tessera::CheckpointError("no blob '" + name + "'");
    const auto* bytes = reinterpret_cast<const std::byte*>(found->second.data());
    return {bytes, bytes + found->second.size()};
  }
  [[nodiscard]] bool contains(const std::string& name) const override {
    return blobs_.contains(name);
  }
  [[nodiscard]] std::vector<tessera::StateSlice> slices() const override { return slices_; }
  // Values of any count: the reader must compare it with the description.
  [[nodiscard]] std::vector<float> slice_values(std::size_t index) const override {
    return values_.at(index);
  }
  [[nodiscard]] int saved_world_size() const override { return 2; }

 private:
  std::map<std::string, std::string> blobs_;
  std::vector<tessera::StateSlice> slices_;
  std::vector<std::vector<float>> values_;
};

// Targets larger than this are not loaded: the fuzzer would only measure the allocator.
constexpr std::size_t kMaxElements = 1 << 16;

// The model a checkpoint's index describes, laid out flat as strategies hold it; empty when it
// is larger than kMaxElements.
tessera::FlatLayout layout_of(const tessera::ParamIndex& index) {
  tessera::FlatLayout layout;
  for (const auto& p : index.params) {
    std::size_t count = 1;
    for (const auto extent : p.shape) {
      if (__builtin_mul_overflow(count, extent, &count)) return {};
    }
    layout.params.push_back(
        {std::to_string(p.layer) + ".?." + p.name, p.name, p.shape, layout.total, count, p.layer});
    if (__builtin_add_overflow(layout.total, count, &layout.total) || layout.total > kMaxElements)
      return {};
  }
  return layout;
}

void load_halves(const MemoryReader& reader, const tessera::FlatLayout& layout) {
  for (std::size_t slots = 0; slots <= 2; ++slots) {
    // Two halves, so ranges that start inside a shard or a parameter are read as well.
    const std::size_t half = layout.total / 2;
    std::vector<float> params(layout.total);
    std::vector<float> state(layout.total * slots);
    try {
      tessera::load_flat_range(reader, layout, half, layout.total, std::span(params).subspan(half),
                               std::span(state).first((layout.total - half) * slots), slots);
    } catch (const tessera::CheckpointError& e) {
      tessera::fuzz::require_own_words(e);
    }
    try {
      const tessera::FlatRangeTarget targets[] = {
          {0, half, std::span(params).first(half), std::span(state).first(half * slots)},
          {half, layout.total, std::span(params).subspan(half),
           std::span(state).subspan(half * slots)}};
      tessera::load_flat_ranges(reader, layout, targets, slots);
    } catch (const tessera::CheckpointError& e) {
      tessera::fuzz::require_own_words(e);
    }
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const MemoryReader reader(tessera::fuzz::split_blobs(tessera::fuzz::as_text(data, size)));
  try {
    (void)tessera::verify_sharded_checkpoint(reader);
  } catch (const tessera::CheckpointError& e) {
    tessera::fuzz::require_own_words(e);
  }
  tessera::FlatLayout layout;
  try {
    const tessera::SliceReader slices(reader);
    layout = layout_of(slices.index());
    if (layout.params.empty()) return 0;
    slices.verify();
    // Every parameter's values and slots, whole and (for a matrix) as a column slice.
    for (const auto& p : slices.index().params) {
      for (std::size_t k = 0; k <= slices.index().state_per_param && k <= 2; ++k) {
        const auto kind =
            k == 0 ? tessera::StateKind::parameter : tessera::StateKind::optimizer_state;
        const std::size_t rows = p.shape.empty() ? 1 : p.shape[0];
        (void)slices.read_slice(p, kind, k == 0 ? 0 : k - 1, 0, 0, rows);
        if (p.shape.size() >= 2 && p.shape[1] > 1)
          (void)slices.read_slice(p, kind, k == 0 ? 0 : k - 1, 1, 1, p.shape[1], 1);
      }
    }
  } catch (const tessera::CheckpointError& e) {
    tessera::fuzz::require_own_words(e);
  }
  if (!reader.contains("parameters")) {
    // Format 1: the layout the checkpoint records is the model loaded into.
    try {
      const auto text = reader.get("flat/layout");
      layout = tessera::FlatLayout::parse(
          std::string(reinterpret_cast<const char*>(text.data()), text.size()));
    } catch (const tessera::CheckpointError& e) {
      tessera::fuzz::require_own_words(e);
      return 0;
    }
    if (layout.total > kMaxElements) return 0;
    for (auto& p : layout.params) p.param = p.name;  // a strategy's model names them
  }
  if (!layout.params.empty()) load_halves(reader, layout);
  return 0;
}
