#include "tessera/strategy_kit/flat_state.hpp"

#include <algorithm>
#include <charconv>
#include <cstring>
#include <sstream>

#include "flat_index.hpp"
#include "tessera/base/error.hpp"

namespace tessera {

using checkpoint_detail::check_layout;
using checkpoint_detail::read_shard_index;

namespace {

std::span<const std::byte> as_bytes_of(std::span<const float> values) {
  return std::as_bytes(values);
}

std::vector<float> as_floats(const std::vector<std::byte>& bytes, const std::string& blob) {
  if (bytes.size() % sizeof(float) != 0) {
    throw CheckpointError("checkpoint blob '" + blob + "' is not a whole number of floats");
  }
  std::vector<float> values(bytes.size() / sizeof(float));
  std::memcpy(values.data(), bytes.data(), bytes.size());
  return values;
}

std::string shape_text(const Shape& shape) {
  std::string text;
  for (std::size_t i = 0; i < shape.size(); ++i) text += (i ? "x" : "") + std::to_string(shape[i]);
  return text.empty() ? "scalar" : text;
}

}  // namespace

FlatLayout FlatLayout::of(const Model& model) {
  FlatLayout layout;
  for (std::size_t l = 0; l < model.layer_count(); ++l) {
    const auto& layer = model.layer(l);
    for (const auto& spec : layer.parameters()) {
      TESSERA_CHECK(spec.dtype == DType::f32,
                    "parameter " + spec.name + " of layer " + layer.name() + " is not f32");
      const std::size_t count = element_count(spec.shape);
      layout.params.push_back({std::to_string(l) + "." + layer.name() + "." + spec.name, spec.shape,
                               layout.total, count, l});
      layout.total += count;
    }
  }
  return layout;
}

std::string FlatLayout::serialize() const {
  std::string text = "flat_layout 1 total " + std::to_string(total) + "\n";
  for (const auto& p : params) {
    text += "param " + std::to_string(p.layer) + " " + std::to_string(p.offset) + " " +
            std::to_string(p.count) + " " + shape_text(p.shape) + " " + p.name + "\n";
  }
  return text;
}

FlatLayout FlatLayout::parse(const std::string& text) {
  FlatLayout layout;
  std::istringstream in(text);
  std::string line;
  std::getline(in, line);
  std::istringstream head(line);
  std::string magic, version, word;
  if (!(head >> magic >> version >> word >> layout.total) || magic != "flat_layout" ||
      version != "1" || word != "total") {
    throw CheckpointError("checkpoint blob 'flat/layout' is malformed: '" + line + "'");
  }
  // Parameters follow each other without gaps, each as large as its shape says, and add up
  // to the total: a layout that does not is refused here, before anything is sized by it.
  std::size_t next = 0;
  while (std::getline(in, line)) {
    const auto bad = [&](const std::string& what) {
      throw CheckpointError("checkpoint blob 'flat/layout' " + what + ": '" + line + "'");
    };
    std::istringstream row(line);
    FlatParam p;
    std::string shape;
    if (!(row >> word >> p.layer >> p.offset >> p.count >> shape) || word != "param") {
      bad("has a bad line");
    }
    std::getline(row >> std::ws, p.name);
    std::size_t elements = 1;
    if (shape != "scalar") {
      std::istringstream dims(shape);
      std::string dim;
      while (std::getline(dims, dim, 'x')) {
        std::size_t value = 0;
        const auto [end, ec] = std::from_chars(dim.data(), dim.data() + dim.size(), value);
        if (dim.empty() || ec != std::errc() || end != dim.data() + dim.size() ||
            __builtin_mul_overflow(elements, value, &elements)) {
          bad("has a bad shape '" + shape + "'");
        }
        p.shape.push_back(value);
      }
    }
    if (elements != p.count) bad("gives a parameter of shape " + shape + " another count");
    if (p.offset != next) bad("leaves a gap or overlap before a parameter");
    if (__builtin_add_overflow(next, p.count, &next)) bad("overflows");
    layout.params.push_back(std::move(p));
  }
  if (next != layout.total) {
    throw CheckpointError("checkpoint blob 'flat/layout' lists " + std::to_string(next) +
                          " elements, its total says " + std::to_string(layout.total));
  }
  return layout;
}

bool operator==(const FlatLayout& a, const FlatLayout& b) {
  if (a.total != b.total || a.params.size() != b.params.size()) return false;
  for (std::size_t i = 0; i < a.params.size(); ++i) {
    const auto& x = a.params[i];
    const auto& y = b.params[i];
    if (x.name != y.name || x.shape != y.shape || x.offset != y.offset || x.count != y.count)
      return false;
  }
  return true;
}

void save_flat_shard(CheckpointWriter& writer, const FlatLayout& layout,
                     std::span<const FlatShard> shards, std::size_t k,
                     std::span<const float> params, std::span<const float> state,
                     std::size_t state_per_param, bool write_index) {
  TESSERA_CHECK(k < shards.size(), "save_flat_shard: no shard " + std::to_string(k));
  const std::size_t length = shards[k].end - shards[k].begin;
  TESSERA_CHECK(params.size() == length && state.size() == length * state_per_param,
                "save_flat_shard: buffers do not match shard " + std::to_string(k));
  if (write_index) {
    const std::string text = layout.serialize();
    writer.put("flat/layout", std::as_bytes(std::span<const char>(text.data(), text.size())));
    std::string index = "shards " + std::to_string(shards.size()) + " state_per_param " +
                        std::to_string(state_per_param) + "\n";
    for (std::size_t i = 0; i < shards.size(); ++i) {
      index += std::to_string(i) + " " + std::to_string(shards[i].begin) + " " +
               std::to_string(shards[i].end) + "\n";
    }
    writer.put("flat/shards", std::as_bytes(std::span<const char>(index.data(), index.size())));
  }
  writer.put("flat/params/" + std::to_string(k), as_bytes_of(params));
  writer.put("flat/optimizer_state/" + std::to_string(k), as_bytes_of(state));
}

void load_flat_range(const CheckpointReader& reader, const FlatLayout& expected, std::size_t begin,
                     std::size_t end, std::span<float> params, std::span<float> state,
                     std::size_t state_per_param) {
  TESSERA_CHECK(end >= begin && params.size() == end - begin, "load_flat_range: bad range");
  const auto index = read_shard_index(reader);
  check_layout(reader, expected);
  if (!state.empty() && index.state_per_param != state_per_param) {
    throw CheckpointError(
        "checkpoint optimizer state has " + std::to_string(index.state_per_param) +
        " slots per parameter, the configured optimizer " + std::to_string(state_per_param) +
        ": was it written with another optimizer?");
  }
  TESSERA_CHECK(state.empty() || state.size() == params.size() * state_per_param,
                "load_flat_range: state buffer size");
  const std::size_t want_end = std::min(end, expected.total);
  std::size_t covered = 0;
  for (std::size_t k = 0; k < index.shards.size(); ++k) {
    const auto shard = index.shards[k];
    const std::size_t lo = std::max(begin, shard.begin);
    const std::size_t hi = std::min(want_end, shard.end);
    if (lo >= hi) continue;
    const std::size_t length = shard.end - shard.begin;
    const auto name = std::to_string(k);
    const auto values = as_floats(reader.get("flat/params/" + name), "flat/params/" + name);
    if (values.size() != length)
      throw CheckpointError("checkpoint blob flat/params/" + name + " has the wrong size");
    std::copy(values.begin() + static_cast<std::ptrdiff_t>(lo - shard.begin),
              values.begin() + static_cast<std::ptrdiff_t>(hi - shard.begin),
              params.begin() + static_cast<std::ptrdiff_t>(lo - begin));
    if (!state.empty()) {
      const auto slots =
          as_floats(reader.get("flat/optimizer_state/" + name), "flat/optimizer_state/" + name);
      if (slots.size() != length * state_per_param) {
        throw CheckpointError("checkpoint blob flat/optimizer_state/" + name +
                              " has the wrong size");
      }
      for (std::size_t s = 0; s < state_per_param; ++s) {
        std::copy(slots.begin() + static_cast<std::ptrdiff_t>(s * length + lo - shard.begin),
                  slots.begin() + static_cast<std::ptrdiff_t>(s * length + hi - shard.begin),
                  state.begin() + static_cast<std::ptrdiff_t>(s * params.size() + lo - begin));
      }
    }
    covered += hi - lo;
  }
  if (covered != (want_end > begin ? want_end - begin : 0)) {
    throw CheckpointError("checkpoint shards do not cover elements [" + std::to_string(begin) +
                          ", " + std::to_string(want_end) + ")");
  }
}

}  // namespace tessera
