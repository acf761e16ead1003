#pragma once
// Reading JSON that tessera wrote but a person or a crash may have changed: every field is
// looked up, type-checked and range-checked here, so a bad value is a CheckpointError naming
// the file and the field, never an exception of the JSON library or a wrapped-around number.

#include <cstdint>
#include <limits>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>

#include "tessera/base/error.hpp"
#include "tessera/plugin/checkpoint_io.hpp"

namespace tessera::checkpoint {

using Json = nlohmann::ordered_json;

// `text` parsed as one JSON value. Refuses a syntax error (with line and column), trailing
// bytes and an object that repeats a key, naming `where` and saying it is damaged.
[[nodiscard]] Json parse_json(std::string_view text, const std::string& where);

// The message of one of nlohmann's exceptions in words, without its "[json.exception.KIND.ID]"
// tag: the one place a JSON library's text is turned into a tessera message.
[[nodiscard]] std::string json_error_words(std::string_view message);

// "<where>: <field> " prefix helpers used by the checks below.
[[noreturn]] void bad_field(const std::string& where, std::string_view field,
                            const std::string& what);

[[nodiscard]] const Json& member(const Json& object, std::string_view key,
                                 const std::string& where);
[[nodiscard]] std::string string_field(const Json& object, std::string_view key,
                                       const std::string& where);

template <class T>
[[nodiscard]] T integer_value(const Json& value, std::string_view field, const std::string& where) {
  if (value.is_number_unsigned()) {
    const auto v = value.get<std::uint64_t>();
    if (v <= static_cast<std::uint64_t>(std::numeric_limits<T>::max())) return static_cast<T>(v);
  } else if (value.is_number_integer()) {
    const auto v = value.get<std::int64_t>();
    if (std::numeric_limits<T>::is_signed &&
        v >= static_cast<std::int64_t>(std::numeric_limits<T>::min()) &&
        v <= static_cast<std::int64_t>(std::numeric_limits<T>::max()))
      return static_cast<T>(v);
    if (!std::numeric_limits<T>::is_signed && v >= 0) return static_cast<T>(v);
  } else {
    bad_field(where, field, "is " + std::string(value.type_name()) + ", not an integer");
  }
  bad_field(where, field, "is out of range: " + value.dump());
}

template <class T>
[[nodiscard]] T integer_field(const Json& object, std::string_view key, const std::string& where) {
  return integer_value<T>(member(object, key, where), key, where);
}

// A CRC-32 as 8 lowercase hex digits, and back (throws CheckpointError naming the field).
[[nodiscard]] std::string hex32(std::uint32_t value);
[[nodiscard]] std::uint32_t crc_field(const Json& object, std::string_view key,
                                      const std::string& where);

[[nodiscard]] Json slice_to_json(const StateSlice& slice);
// Throws CheckpointError when a field is missing, mistyped or slice_problem() objects.
[[nodiscard]] StateSlice slice_from_json(const Json& value, const std::string& where);

}  // namespace tessera::checkpoint
