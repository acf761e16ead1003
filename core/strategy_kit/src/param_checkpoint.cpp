#include "tessera/strategy_kit/param_checkpoint.hpp"

#include <algorithm>
#include <cstring>
#include <limits>
#include <optional>

#include "flat_index.hpp"
#include "json_fields.hpp"
#include "tessera/base/error.hpp"
#include "tessera/strategy_kit/sharded_checkpoint.hpp"

namespace tessera {

namespace {

using checkpoint::Json;

constexpr const char* kIndexBlob = "parameters";
constexpr const char* kIndexFormat = "tessera-parameters";

std::string state_text(StateKind kind, std::size_t slot) {
  return kind == StateKind::parameter ? std::string("values")
                                      : "optimizer state slot " + std::to_string(slot);
}

// How the elements of a box "dim restricted to [begin, end), the rest whole" of a parameter sit
// in the parameter's row-major order. A box that takes its dimension whole is the parameter
// itself, one contiguous run; otherwise runs are `inner` elements long.
struct BoxMap {
  std::size_t inner = 1;   // elements per index of `dim`
  std::size_t extent = 1;  // the parameter's extent along dim
  std::size_t begin = 0;
  std::size_t width = 1;  // end - begin
  std::size_t size = 0;   // elements in the box
  bool whole = false;

  static BoxMap of(const Shape& raw_shape, std::size_t dim, std::size_t begin, std::size_t end) {
    const Shape shape = raw_shape.empty() ? Shape{1} : raw_shape;
    BoxMap map;
    for (std::size_t d = dim + 1; d < shape.size(); ++d) map.inner *= shape[d];
    map.extent = shape[dim];
    map.begin = begin;
    map.width = end - begin;
    std::size_t outer = 1;
    for (std::size_t d = 0; d < dim; ++d) outer *= shape[d];
    map.size = outer * map.width * map.inner;
    map.whole = begin == 0 && end == map.extent;
    return map;
  }
  // Parameter index of box element v, and how many box elements from v on follow it there.
  [[nodiscard]] std::pair<std::size_t, std::size_t> to_param(std::size_t v) const {
    if (whole) return {v, size - v};
    const std::size_t row = v / inner;  // outer * width + column within the box
    const std::size_t at = v % inner;
    const std::size_t o = row / width;
    const std::size_t c = row % width;
    // Within one index of the dimensions before `dim`, the rest of the box is contiguous.
    return {(o * extent + begin + c) * inner + at, (width - c) * inner - at};
  }
  // Box index of parameter element g (nullopt when outside the box), and how many parameter
  // elements from g on share that answer contiguously.
  [[nodiscard]] std::pair<std::optional<std::size_t>, std::size_t> from_param(std::size_t g) const {
    if (whole) return {g, std::numeric_limits<std::size_t>::max()};
    const std::size_t at = g % inner;
    const std::size_t row = g / inner;
    const std::size_t c = row % extent;
    const std::size_t o = row / extent;
    if (c < begin) return {std::nullopt, (begin - c) * inner - at};
    if (c >= begin + width) return {std::nullopt, (extent - c) * inner - at};
    return {(o * width + c - begin) * inner + at, (begin + width - c) * inner - at};
  }
};

// Calls copy(box element of `from` (0-based within its [first, last)), output index, count) for
// every run of `from`'s elements that falls inside `to`'s box elements [to_first, to_last).
template <class Copy>
void intersect(const StateSlice& from, const BoxMap& to, std::size_t to_first, std::size_t to_last,
               Copy&& copy) {
  const auto source = BoxMap::of(from.shape, from.dim, from.begin, from.end);
  std::size_t v = from.first;
  while (v < from.last) {
    const auto [g0, run0] = source.to_param(v);
    const std::size_t run = std::min(run0, from.last - v);
    std::size_t done = 0;
    while (done < run) {
      const auto [target, span] = to.from_param(g0 + done);
      std::size_t n = std::min(span, run - done);
      if (target) {
        std::size_t t = *target;
        std::size_t skip = 0;
        if (t < to_first) skip = std::min(n, to_first - t);
        t += skip;
        if (skip < n && t < to_last) {
          const std::size_t count = std::min(n - skip, to_last - t);
          copy(v - from.first + done + skip, t - to_first, count);
        }
      }
      done += n;
    }
    v += run;
  }
}

std::vector<float> floats_of(const std::vector<std::byte>& bytes, const std::string& blob) {
  if (bytes.size() % sizeof(float) != 0) {
    throw CheckpointError("checkpoint blob '" + blob + "' holds " + std::to_string(bytes.size()) +
                          " bytes, not a whole number of floats");
  }
  std::vector<float> values(bytes.size() / sizeof(float));
  std::memcpy(values.data(), bytes.data(), bytes.size());
  return values;
}

// A format-1 parameter name "<layer>.<layer name>.<param name>" without its model: the in-tree
// layers name their parameters "<layer name>.<what>", which picks the split; otherwise the
// layer's name is taken to end at the first dot.
std::string param_name_of_v1(const FlatParam& p) {
  const std::string prefix = std::to_string(p.layer) + ".";
  const std::string rest = p.name.rfind(prefix, 0) == 0 ? p.name.substr(prefix.size()) : p.name;
  for (std::size_t dot = rest.find('.'); dot != std::string::npos; dot = rest.find('.', dot + 1)) {
    const std::string layer = rest.substr(0, dot);
    if (rest.compare(dot + 1, layer.size() + 1, layer + ".") == 0) return rest.substr(dot + 1);
  }
  const auto dot = rest.find('.');
  return dot == std::string::npos ? rest : rest.substr(dot + 1);
}

// Elements [lo, hi) of the flat layout, all inside parameter `p`, as a slice of that
// parameter: the whole of dimension 0 and the elements' range within the parameter.
StateSlice flat_parameter_slice(const FlatParam& p, std::size_t lo, std::size_t hi) {
  return {p.layer,
          p.param,
          p.shape,
          StateKind::parameter,
          0,
          0,
          0,
          p.shape.empty() ? 1 : p.shape[0],
          lo - p.offset,
          hi - p.offset};
}

}  // namespace

// One slice the reader knows: its description, and where its values are (a format-2 slice
// blob, or a stretch of a format-1 flat blob).
struct SliceReader::Entry {
  StateSlice slice;
  std::size_t param = 0;        // index into index_.params
  std::size_t blob = 0;         // format 2: index into reader.slices()
  std::string flat_blob;        // format 1: flat/params/K or flat/optimizer_state/K
  std::size_t flat_floats = 0;  // format 1: the size that blob must have
  std::size_t flat_offset = 0;  // format 1: where this slice's values start in it
  [[nodiscard]] std::string name() const {
    return flat_blob.empty() ? slice_blob_name(slice) : flat_blob;
  }
};

// Part [begin, end) of a box, held by entries_[entry].
struct SliceReader::Covered {
  std::size_t begin = 0;
  std::size_t end = 0;
  std::size_t entry = 0;
};

std::string describe(const ParamId& param) {
  return std::to_string(param.layer) + "." + param.name + " [" + shape_text(param.shape) + "]";
}

std::vector<ParamId> params_of(const FlatLayout& layout) {
  std::vector<ParamId> params;
  for (const auto& p : layout.params) params.push_back({p.layer, p.param, p.shape});
  return params;
}

void save_param_index(CheckpointWriter& writer, const ParamIndex& index) {
  Json j;
  j["format"] = kIndexFormat;
  j["version"] = 1;
  j["strategy"] = index.strategy;
  j["state_per_param"] = index.state_per_param;
  TESSERA_CHECK(index.weight_decay.empty() || index.weight_decay.size() == index.params.size(),
                "save_param_index: " + std::to_string(index.weight_decay.size()) +
                    " weight-decay flags for " + std::to_string(index.params.size()) +
                    " parameters");
  j["parameters"] = Json::array();
  for (std::size_t i = 0; i < index.params.size(); ++i) {
    const auto& p = index.params[i];
    Json entry{{"layer", p.layer}, {"name", p.name}, {"shape", p.shape}};
    if (!index.weight_decay.empty())
      entry["weight_decay"] = static_cast<bool>(index.weight_decay[i]);
    j["parameters"].push_back(std::move(entry));
  }
  const auto text = j.dump(1) + "\n";
  writer.put(kIndexBlob, std::as_bytes(std::span<const char>(text.data(), text.size())));
}

void save_flat_range(CheckpointWriter& writer, const FlatLayout& layout, std::size_t begin,
                     std::size_t end, std::span<const float> params, std::span<const float> state,
                     std::size_t state_per_param) {
  TESSERA_CHECK(end >= begin && params.size() == end - begin &&
                    state.size() == (end - begin) * state_per_param,
                "save_flat_range: buffers do not match [" + std::to_string(begin) + ", " +
                    std::to_string(end) + ")");
  const std::size_t length = end - begin;
  for (const auto& p : layout.params) {
    const std::size_t lo = std::max(begin, p.offset);
    const std::size_t hi = std::min(end, p.offset + p.count);
    if (lo >= hi) continue;
    StateSlice slice = flat_parameter_slice(p, lo, hi);
    writer.put_slice(slice, params.subspan(lo - begin, hi - lo));
    slice.kind = StateKind::optimizer_state;
    for (std::size_t s = 0; s < state_per_param; ++s) {
      slice.slot = s;
      writer.put_slice(slice, state.subspan(s * length + lo - begin, hi - lo));
    }
  }
}

SliceReader::SliceReader(const CheckpointReader& reader, const FlatLayout* model)
    : reader_(reader) {
  const auto slices = reader.slices();
  if (reader.contains(kIndexBlob)) {
    const std::string where = "checkpoint blob 'parameters'";
    const auto j =
        checkpoint::parse_json(checkpoint_detail::text_of(reader.get(kIndexBlob)), where);
    if (checkpoint::string_field(j, "format", where) != kIndexFormat ||
        checkpoint::integer_field<int>(j, "version", where) != 1) {
      throw CheckpointError(where + " is not a parameter index of version 1");
    }
    index_.strategy = checkpoint::string_field(j, "strategy", where);
    index_.state_per_param = checkpoint::integer_field<std::size_t>(j, "state_per_param", where);
    const auto& list = checkpoint::member(j, "parameters", where);
    if (!list.is_array()) checkpoint::bad_field(where, "parameters", "is not an array");
    for (std::size_t i = 0; i < list.size(); ++i) {
      const std::string at = where + " parameter " + std::to_string(i);
      ParamId p;
      p.layer = checkpoint::integer_field<std::size_t>(list[i], "layer", at);
      p.name = checkpoint::string_field(list[i], "name", at);
      const auto& shape = checkpoint::member(list[i], "shape", at);
      if (!shape.is_array()) checkpoint::bad_field(at, "shape", "is not an array");
      for (const auto& extent : shape)
        p.shape.push_back(checkpoint::integer_value<std::size_t>(extent, "shape", at));
      if (std::find(index_.params.begin(), index_.params.end(), p) != index_.params.end())
        throw CheckpointError(where + " lists " + describe(p) + " twice");
      // Recorded for every parameter or (written before tessera recorded it) for none.
      const bool recorded = list[i].contains("weight_decay");
      if (i > 0 && recorded == index_.weight_decay.empty())
        checkpoint::bad_field(at, "weight_decay", "is given for some parameters but not all");
      if (recorded) {
        if (!list[i]["weight_decay"].is_boolean())
          checkpoint::bad_field(at, "weight_decay", "is not true or false");
        index_.weight_decay.push_back(list[i]["weight_decay"].get<bool>());
      }
      index_.params.push_back(std::move(p));
    }
    for (std::size_t i = 0; i < slices.size(); ++i) {
      const auto& s = slices[i];
      const std::string blob = "checkpoint blob '" + slice_blob_name(s) + "'";
      if (const auto problem = slice_problem(s); !problem.empty())
        throw CheckpointError(blob + ": the slice " + problem);
      const ParamId id{s.layer, s.param, s.shape};
      const auto it =
          std::find_if(index_.params.begin(), index_.params.end(),
                       [&](const ParamId& p) { return p.layer == id.layer && p.name == id.name; });
      if (it == index_.params.end())
        throw CheckpointError(blob + " is a slice of " + describe(id) +
                              ", which 'parameters' does not list");
      if (it->shape != id.shape)
        throw CheckpointError(blob + " gives " + describe(id) +
                              " another shape than 'parameters' (" + shape_text(it->shape) + ")");
      if (s.kind == StateKind::optimizer_state && s.slot >= index_.state_per_param) {
        throw CheckpointError(blob + " holds optimizer state slot " + std::to_string(s.slot) +
                              ", but the optimizer had " + std::to_string(index_.state_per_param));
      }
      Entry entry;
      entry.slice = s;
      entry.param = static_cast<std::size_t>(it - index_.params.begin());
      entry.blob = i;
      entries_.push_back(std::move(entry));
    }
    return;
  }
  if (!slices.empty()) {
    throw CheckpointError(
        "checkpoint holds slices of parameters but no parameter index (the blob "
        "'parameters'): it is incomplete");
  }
  // Format 1: contiguous shards of the flat parameter vector.
  format_version_ = 1;
  const auto shards = checkpoint_detail::read_shard_index(reader);
  auto layout = FlatLayout::parse(checkpoint_detail::text_of(reader.get("flat/layout")));
  if (model != nullptr) {
    if (!(layout == *model))
      throw CheckpointError(
          "checkpoint was written for another model: its parameter layout differs");
    layout = *model;
  } else {
    for (auto& p : layout.params) p.param = param_name_of_v1(p);
  }
  if (verify_sharded_checkpoint(reader)) {
    index_.strategy =
        ShardedManifest::parse(checkpoint_detail::text_of(reader.get("sharded/manifest"))).strategy;
  }
  index_.state_per_param = shards.state_per_param;
  index_.params = params_of(layout);
  for (std::size_t k = 0; k < shards.shards.size(); ++k) {
    const auto shard = shards.shards[k];
    const std::size_t length = shard.end - shard.begin;
    for (std::size_t i = 0; i < layout.params.size(); ++i) {
      const auto& p = layout.params[i];
      const std::size_t lo = std::max(shard.begin, p.offset);
      const std::size_t hi = std::min(shard.end, p.offset + p.count);
      if (lo >= hi) continue;
      Entry entry;
      entry.slice = flat_parameter_slice(p, lo, hi);
      entry.param = i;
      entry.flat_blob = "flat/params/" + std::to_string(k);
      entry.flat_floats = length;
      entry.flat_offset = lo - shard.begin;
      entries_.push_back(entry);
      entry.slice.kind = StateKind::optimizer_state;
      entry.flat_blob = "flat/optimizer_state/" + std::to_string(k);
      if (__builtin_mul_overflow(length, shards.state_per_param, &entry.flat_floats))
        throw CheckpointError("checkpoint blob 'flat/shards' is malformed at shard " +
                              std::to_string(k));
      for (std::size_t s = 0; s < shards.state_per_param; ++s) {
        entry.slice.slot = s;
        entry.flat_offset = s * length + lo - shard.begin;
        entries_.push_back(entry);
      }
    }
  }
}

SliceReader::~SliceReader() = default;

void SliceReader::check_params(const std::vector<ParamId>& params) const {
  for (std::size_t i = 0; i < std::max(params.size(), index_.params.size()); ++i) {
    if (i >= params.size() || i >= index_.params.size() || !(params[i] == index_.params[i])) {
      throw CheckpointError(
          "checkpoint was written for another model: its parameter " + std::to_string(i) + " is " +
          (i < index_.params.size() ? describe(index_.params[i]) : std::string("missing")) +
          ", the model's " + (i < params.size() ? describe(params[i]) : std::string("missing")) +
          "; load it into the model built with the [model] options it was written with (a "
          "parameter the model ties to another one has no entry of its own)");
    }
  }
}

void SliceReader::check_state_slots(std::size_t state_per_param) const {
  if (index_.state_per_param != state_per_param) {
    throw CheckpointError(
        "checkpoint optimizer state has " + std::to_string(index_.state_per_param) +
        " slots per parameter, the configured optimizer " + std::to_string(state_per_param) +
        ": was it written with another optimizer?");
  }
}

std::vector<float> SliceReader::values_of(const Entry& entry) const {
  if (entry.flat_blob.empty()) {
    auto values = reader_.slice_values(entry.blob);
    if (values.size() != entry.slice.elements()) {
      throw CheckpointError("checkpoint blob '" + entry.name() + "' holds " +
                            std::to_string(values.size()) + " values, its slice " +
                            std::to_string(entry.slice.elements()));
    }
    return values;
  }
  if (cached_name_ != entry.flat_blob) {
    cached_name_.clear();
    cached_ = floats_of(reader_.get(entry.flat_blob), entry.flat_blob);
    if (cached_.size() != entry.flat_floats) {
      throw CheckpointError("checkpoint blob '" + entry.flat_blob + "' holds " +
                            std::to_string(cached_.size() * sizeof(float)) +
                            " bytes, its shard needs " +
                            std::to_string(entry.flat_floats * sizeof(float)));
    }
    cached_name_ = entry.flat_blob;
  }
  const auto from = cached_.begin() + static_cast<std::ptrdiff_t>(entry.flat_offset);
  return {from, from + static_cast<std::ptrdiff_t>(entry.slice.elements())};
}

std::vector<float> SliceReader::read_slice(const ParamId& param, StateKind kind, std::size_t slot,
                                           std::size_t dim, std::size_t begin, std::size_t end,
                                           std::size_t first, std::size_t last) const {
  const auto it = std::find(index_.params.begin(), index_.params.end(), param);
  if (it == index_.params.end())
    throw CheckpointError("checkpoint has no parameter " + describe(param));
  const std::size_t p = static_cast<std::size_t>(it - index_.params.begin());
  if (kind == StateKind::parameter) slot = 0;
  const std::string what = describe(param) + " " + state_text(kind, slot);
  if (kind == StateKind::optimizer_state && slot >= index_.state_per_param) {
    throw CheckpointError("checkpoint has no " + what + " (its optimizer had " +
                          std::to_string(index_.state_per_param) + " slots)");
  }
  StateSlice request{param.layer, param.name, param.shape, kind, 0, dim, begin, end, 0, 1};
  if (const auto problem = slice_problem(request); !problem.empty())
    throw CheckpointError("read_slice of " + what + ": the request " + problem);
  const auto box = BoxMap::of(param.shape, dim, begin, end);
  last = std::min(last, box.size);
  if (first >= last) return {};
  std::vector<float> out(last - first);
  std::vector<Covered> covered;
  for (std::size_t e = 0; e < entries_.size(); ++e) {
    const auto& entry = entries_[e];
    if (entry.param != p || entry.slice.kind != kind || entry.slice.slot != slot) continue;
    std::optional<std::vector<float>> values;
    intersect(entry.slice, box, first, last, [&](std::size_t from, std::size_t to, std::size_t n) {
      if (!values) values = values_of(entry);
      std::copy_n(values->begin() + static_cast<std::ptrdiff_t>(from), n,
                  out.begin() + static_cast<std::ptrdiff_t>(to));
      covered.push_back({to, to + n, e});
    });
  }
  check_coverage(covered, out.size(), first,
                 "dimension " + std::to_string(dim) + " [" + std::to_string(begin) + ", " +
                     std::to_string(end) + ") of " + what);
  return out;
}

void SliceReader::check_coverage(std::vector<Covered>& covered, std::size_t size, std::size_t first,
                                 const std::string& what) const {
  std::sort(covered.begin(), covered.end(),
            [](const Covered& a, const Covered& b) { return a.begin < b.begin; });
  std::size_t next = 0;
  std::size_t last_entry = 0;
  for (const auto& c : covered) {
    if (c.begin < next) {
      throw CheckpointError("checkpoint blobs '" + entries_[last_entry].name() + "' and '" +
                            entries_[c.entry].name() + "' both hold element " +
                            std::to_string(first + c.begin) + " of " + what +
                            ": the checkpoint's slices overlap");
    }
    if (c.begin > next) break;
    next = c.end;
    last_entry = c.entry;
  }
  if (next < size) {
    throw CheckpointError("checkpoint holds no blob for element " + std::to_string(first + next) +
                          " of " + what +
                          ": a rank's blobs are missing or the checkpoint is incomplete");
  }
}

void SliceReader::verify() const {
  // Format 1 derives its slices from flat/shards: the blobs must really hold what that claims
  // before anything is sized by it.
  std::string checked;
  for (const auto& entry : entries_) {
    if (entry.flat_blob.empty() || entry.flat_blob == checked) continue;
    (void)values_of(entry);
    checked = entry.flat_blob;
  }
  for (std::size_t p = 0; p < index_.params.size(); ++p) {
    const auto& param = index_.params[p];
    const auto box = BoxMap::of(param.shape, 0, 0, param.shape.empty() ? 1 : param.shape[0]);
    if (const auto problem =
            slice_problem({param.layer, param.name, param.shape, StateKind::parameter, 0, 0, 0,
                           param.shape.empty() ? 1 : param.shape[0], 0, 1});
        !problem.empty()) {
      throw CheckpointError("checkpoint parameter " + describe(param) + " " + problem);
    }
    for (std::size_t k = 0; k <= index_.state_per_param; ++k) {
      const auto kind = k == 0 ? StateKind::parameter : StateKind::optimizer_state;
      const std::size_t slot = k == 0 ? 0 : k - 1;
      const std::string what = describe(param) + " " + state_text(kind, slot);
      // Fewer elements described than the parameter has: say so before walking anything.
      std::size_t described = 0;
      for (const auto& entry : entries_) {
        if (entry.param == p && entry.slice.kind == kind && entry.slice.slot == slot &&
            __builtin_add_overflow(described, entry.slice.elements(), &described))
          described = std::numeric_limits<std::size_t>::max();
      }
      if (described < box.size) {
        throw CheckpointError("checkpoint blobs hold " + std::to_string(described) + " of the " +
                              std::to_string(box.size) + " elements of " + what +
                              ": a rank's blobs are missing or the checkpoint is incomplete");
      }
      std::vector<Covered> covered;
      for (std::size_t e = 0; e < entries_.size(); ++e) {
        const auto& entry = entries_[e];
        if (entry.param != p || entry.slice.kind != kind || entry.slice.slot != slot) continue;
        intersect(entry.slice, box, 0, box.size, [&](std::size_t, std::size_t to, std::size_t n) {
          // Runs of one entry that continue each other count as one.
          if (!covered.empty() && covered.back().entry == e && covered.back().end == to) {
            covered.back().end += n;
          } else {
            covered.push_back({to, to + n, e});
          }
        });
      }
      check_coverage(covered, box.size, 0, what);
    }
  }
}

void load_flat_range(const CheckpointReader& reader, const FlatLayout& expected, std::size_t begin,
                     std::size_t end, std::span<float> params, std::span<float> state,
                     std::size_t state_per_param) {
  const FlatRangeTarget target{begin, end, params, state};
  load_flat_ranges(reader, expected, std::span<const FlatRangeTarget>(&target, 1), state_per_param);
}

void load_flat_ranges(const CheckpointReader& reader, const FlatLayout& expected,
                      std::span<const FlatRangeTarget> targets, std::size_t state_per_param) {
  const SliceReader slices(reader, &expected);
  slices.check_params(params_of(expected));
  const bool want_state = std::any_of(targets.begin(), targets.end(),
                                      [](const FlatRangeTarget& t) { return !t.state.empty(); });
  if (want_state) slices.check_state_slots(state_per_param);
  for (const auto& t : targets) {
    TESSERA_CHECK(t.end >= t.begin && (t.params.empty() || t.params.size() == t.end - t.begin) &&
                      (t.state.empty() || t.state.size() == (t.end - t.begin) * state_per_param),
                  "load_flat_ranges: a target's buffers do not match its range");
  }
  slices.verify();
  for (const auto& p : expected.params) {
    const ParamId id{p.layer, p.param, p.shape};
    const std::size_t rows = p.shape.empty() ? 1 : p.shape[0];
    for (const auto& t : targets) {
      const std::size_t lo = std::max(t.begin, p.offset);
      const std::size_t hi = std::min(t.end, p.offset + p.count);
      if (lo >= hi) continue;
      const std::size_t first = lo - p.offset;
      const std::size_t last = hi - p.offset;
      const auto at = static_cast<std::ptrdiff_t>(lo - t.begin);
      if (!t.params.empty()) {
        const auto values = slices.read_slice(id, StateKind::parameter, 0, 0, 0, rows, first, last);
        std::copy(values.begin(), values.end(), t.params.begin() + at);
      }
      if (!t.state.empty()) {
        const std::size_t length = t.end - t.begin;
        for (std::size_t s = 0; s < state_per_param; ++s) {
          const auto values =
              slices.read_slice(id, StateKind::optimizer_state, s, 0, 0, rows, first, last);
          std::copy(values.begin(), values.end(),
                    t.state.begin() + static_cast<std::ptrdiff_t>(s * length) + at);
        }
      }
    }
  }
}

}  // namespace tessera
