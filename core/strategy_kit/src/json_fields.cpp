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

// nlohmann's name of a token or a parse context, as a person would say it.
std::string token_words(std::string_view token) {
  static constexpr std::pair<std::string_view, std::string_view> kWords[] = {
      {"'[', '{', or a literal", "a value"},
      {"end of input", "the end of the text"},
      {"string literal", "a string"},
      {"number literal", "a number"},
      {"true literal", "true"},
      {"false literal", "false"},
      {"null literal", "null"},
      {"<parse error>", "something that is not JSON"},
      {"value", "a value"},
      {"object key", "an object's key"},
      {"object separator", "an object's ':'"},
      {"array", "an array"},
      {"object", "an object"},
  };
  for (const auto& [name, words] : kWords) {
    if (token == name) return std::string(words);
  }
  return std::string(token);
}

// What the lexer says it found, in words: "invalid literal" is nlohmann's name for any text
// that starts no JSON value (or a literal the end of the text cut short).
std::string found_words(std::string_view lexer_message, bool at_end) {
  if (lexer_message == "invalid literal") {
    return at_end ? "the end of the text" : "text that is not JSON";
  }
  if (lexer_message == "unexpected end of input") return "the end of the text";
  // "invalid number; expected digit after '-'" -> "an invalid number (expected digit after '-')"
  std::string words(lexer_message);
  if (const auto semicolon = words.find("; "); semicolon != std::string::npos) {
    words = words.substr(0, semicolon) + " (" + words.substr(semicolon + 2) + ")";
  }
  return words.starts_with("invalid ") ? "an " + words : words;
}

// A parse error's message without nlohmann's tag, position and "last read" echo (which can
// hold raw bytes of the file): "expected an object's key, found text that is not JSON".
std::string parse_error_words(std::string_view message, bool at_end) {
  constexpr std::string_view kSyntax = "syntax error ";
  const auto syntax = message.find(kSyntax);
  if (syntax == std::string_view::npos) return json_error_words(message);
  std::string_view rest = message.substr(syntax + kSyntax.size());
  std::string context;
  constexpr std::string_view kWhile = "while parsing ";
  if (rest.starts_with(kWhile)) {
    const auto dash = rest.find(" - ");
    context = token_words(rest.substr(kWhile.size(), dash - kWhile.size()));
    rest = dash == std::string_view::npos ? std::string_view() : rest.substr(dash + 3);
  } else if (rest.starts_with("- ")) {
    rest.remove_prefix(2);
  }
  // Either "LEXER MESSAGE; last read: 'TEXT'" or "unexpected TOKEN", then maybe
  // "; expected TOKEN". A lexer message may hold "; expected" of its own ("invalid number;
  // expected digit after '-'"), and TEXT any byte: the expectation is looked for after TEXT.
  std::string expected;
  std::string_view tail = rest;
  constexpr std::string_view kEcho = "; last read: '";
  if (const auto echo = rest.find(kEcho); echo != std::string_view::npos) {
    tail = rest.substr(echo + kEcho.size());
    rest = rest.substr(0, echo);
    const auto close = tail.rfind("'; expected ");
    tail = close == std::string_view::npos ? std::string_view() : tail.substr(close + 1);
  }
  constexpr std::string_view kExpected = "; expected ";
  if (const auto e = tail.rfind(kExpected); e != std::string_view::npos) {
    expected = token_words(tail.substr(e + kExpected.size()));
    if (tail.data() == rest.data()) rest = rest.substr(0, e);
  }
  std::string found;
  constexpr std::string_view kUnexpected = "unexpected ";
  if (rest.starts_with(kUnexpected) && rest != "unexpected end of input") {
    found = token_words(rest.substr(kUnexpected.size()));
  } else {
    found = found_words(rest, at_end);
  }
  std::string words;
  if (!expected.empty()) words = "expected " + expected + ", ";
  words += "found " + found;
  if (!context.empty()) words += " while reading " + context;
  return words;
}

}  // namespace

std::string json_error_words(std::string_view message) {
  // "[json.exception.out_of_range.406] number overflow parsing '1e400'" -> the part after the tag.
  if (message.starts_with("[json.exception.")) {
    if (const auto end = message.find("] "); end != std::string_view::npos) {
      message.remove_prefix(end + 2);
    }
  }
  constexpr std::string_view kParseError = "parse error";
  if (message.starts_with(kParseError)) {
    if (const auto colon = message.find(": "); colon != std::string_view::npos) {
      message.remove_prefix(colon + 2);
    }
  }
  return std::string(message);
}

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
  // nlohmann stops at a NUL byte as at the end of the text, so bytes after one would pass
  // unread; JSON never holds a raw NUL (strings escape it), so one is damage wherever it is.
  if (const auto nul = text.find('\0'); nul != std::string_view::npos) {
    throw CheckpointError(where + ":" + line_and_column(text, nul) + ": not valid JSON at byte " +
                          std::to_string(nul) + " of " + std::to_string(text.size()) +
                          ": a NUL byte, which JSON text never holds; the file is corrupted");
  }
  Json value;
  try {
    value = Json::parse(text.begin(), text.end(), track);
  } catch (const Json::parse_error& e) {
    const auto offset = std::min<std::size_t>(e.byte == 0 ? 0 : e.byte - 1, text.size());
    throw CheckpointError(where + ":" + line_and_column(text, offset) + ": not valid JSON at byte " +
                          std::to_string(offset) + " of " + std::to_string(text.size()) + ": " +
                          parse_error_words(e.what(), offset >= text.size()) +
                          "; the file is truncated or corrupted");
  } catch (const Json::exception& e) {
    // Valid syntax the parser still cannot hold, such as a number beyond a double's range
    // (1e400): every other nlohmann error is a refusal of the file too, never an escape.
    throw CheckpointError(where + ": not a value tessera writes (" + json_error_words(e.what()) +
                          "); the file is corrupted");
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
