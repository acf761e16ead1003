#include "json_fields.hpp"

#include <charconv>
#include <cstdio>
#include <set>
#include <vector>

namespace tessera::checkpoint {

namespace {

// Line and column (1-based) of byte `offset` of `text`, for messages a person can follow.
std::string line_and_column(std::string_view text, std::size_t offset) {
  offset = std::min(offset, text.size());
  std::size_t line = 1;
  std::size_t column = 1;
  for (std::size_t i = 0; i < offset; ++i) {
    if (text[i] == '\n') {
      ++line;
      column = 1;
    } else {
      ++column;
    }
  }
  return std::to_string(line) + ":" + std::to_string(column);
}

}  // namespace

Json parse_json(std::string_view text, const std::string& where) {
  // nlohmann keeps the last of repeated keys; a repeated key is an edit, so it is refused.
  std::vector<std::set<std::string>> keys;
  std::string repeated;
  // tessera's JSON nests a few levels; far deeper text is damage, and refusing it keeps every
  // recursive walk (dump, comparison) of the value shallow.
  constexpr int kMaxDepth = 16;
  bool too_deep = false;
  const Json::parser_callback_t track = [&](int depth, Json::parse_event_t event, Json& parsed) {
    if (depth > kMaxDepth) {
      too_deep = true;
      return false;
    }
    if (event == Json::parse_event_t::object_start) {
      keys.emplace_back();
    } else if (event == Json::parse_event_t::object_end) {
      if (!keys.empty()) keys.pop_back();
    } else if (event == Json::parse_event_t::key && !keys.empty() && repeated.empty()) {
      const auto key = parsed.get<std::string>();
      if (!keys.back().insert(key).second) repeated = key;
    }
    return true;
  };
  Json value;
  try {
    value = Json::parse(text.begin(), text.end(), track);
  } catch (const Json::parse_error& e) {
    const auto offset = e.byte == 0 ? 0 : e.byte - 1;
    throw CheckpointError(where + ":" + line_and_column(text, offset) + ": not valid JSON (" +
                          e.what() + "): the file is truncated or corrupted");
  } catch (const Json::exception& e) {
    // Valid syntax the parser still cannot hold, such as a number beyond a double's range
    // (1e400): every other nlohmann error is a refusal of the file too, never an escape.
    throw CheckpointError(where + ": not a value tessera writes (" + std::string(e.what()) +
                          "): the file is corrupted");
  }
  if (too_deep) {
    throw CheckpointError(where + ": nested deeper than " + std::to_string(kMaxDepth) +
                          " levels: the file is corrupted");
  }
  if (!repeated.empty()) bad_field(where, repeated, "appears twice in one object");
  return value;
}

void bad_field(const std::string& where, std::string_view field, const std::string& what) {
  throw CheckpointError(where + ": field \"" + std::string(field) + "\" " + what);
}

const Json& member(const Json& object, std::string_view key, const std::string& where) {
  if (!object.is_object()) throw CheckpointError(where + ": expected a JSON object");
  const auto it = object.find(std::string(key));
  if (it == object.end()) bad_field(where, key, "is missing");
  return *it;
}

std::string string_field(const Json& object, std::string_view key, const std::string& where) {
  const auto& value = member(object, key, where);
  if (!value.is_string())
    bad_field(where, key, "is " + std::string(value.type_name()) + ", not a string");
  return value.get<std::string>();
}

std::string hex32(std::uint32_t value) {
  char text[9];
  std::snprintf(text, sizeof text, "%08x", value);
  return text;
}

std::uint32_t crc_field(const Json& object, std::string_view key, const std::string& where) {
  const auto text = string_field(object, key, where);
  std::uint32_t value = 0;
  const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), value, 16);
  if (text.size() != 8 || ec != std::errc() || end != text.data() + text.size())
    bad_field(where, key, "is '" + text + "', not 8 hex digits");
  return value;
}

Json slice_to_json(const StateSlice& slice) {
  Json j;
  j["layer"] = slice.layer;
  j["param"] = slice.param;
  j["shape"] = slice.shape;
  j["kind"] = slice.kind == StateKind::parameter ? "parameter" : "optimizer_state";
  if (slice.kind == StateKind::optimizer_state) j["slot"] = slice.slot;
  j["dim"] = slice.dim;
  j["begin"] = slice.begin;
  j["end"] = slice.end;
  j["elements"] = Json::array({slice.first, slice.last});
  return j;
}

StateSlice slice_from_json(const Json& value, const std::string& where) {
  static const std::set<std::string> known = {"layer", "param", "shape", "kind",    "slot",
                                              "dim",   "begin", "end",   "elements"};
  if (!value.is_object()) throw CheckpointError(where + ": the slice is not a JSON object");
  for (const auto& item : value.items()) {
    if (known.count(item.key()) == 0) bad_field(where, item.key(), "is not a slice field");
  }
  StateSlice slice;
  slice.layer = integer_field<std::size_t>(value, "layer", where);
  slice.param = string_field(value, "param", where);
  const auto& shape = member(value, "shape", where);
  if (!shape.is_array()) bad_field(where, "shape", "is not an array");
  for (const auto& extent : shape)
    slice.shape.push_back(integer_value<std::size_t>(extent, "shape", where));
  const auto kind = string_field(value, "kind", where);
  if (kind == "parameter") {
    slice.kind = StateKind::parameter;
    if (value.contains("slot")) bad_field(where, "slot", "is given for a parameter");
  } else if (kind == "optimizer_state") {
    slice.kind = StateKind::optimizer_state;
    slice.slot = integer_field<std::size_t>(value, "slot", where);
  } else {
    bad_field(where, "kind", "is '" + kind + "', not parameter or optimizer_state");
  }
  slice.dim = integer_field<std::size_t>(value, "dim", where);
  slice.begin = integer_field<std::size_t>(value, "begin", where);
  slice.end = integer_field<std::size_t>(value, "end", where);
  const auto& elements = member(value, "elements", where);
  if (!elements.is_array() || elements.size() != 2)
    bad_field(where, "elements", "is not a pair [first, last]");
  slice.first = integer_value<std::size_t>(elements[0], "elements", where);
  slice.last = integer_value<std::size_t>(elements[1], "elements", where);
  if (const auto problem = slice_problem(slice); !problem.empty())
    throw CheckpointError(where + ": slice of " + std::to_string(slice.layer) + "." + slice.param +
                          " " + problem);
  return slice;
}

}  // namespace tessera::checkpoint
