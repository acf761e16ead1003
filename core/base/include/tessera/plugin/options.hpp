#pragma once
// Typed option schemas and resolved option values: how a plugin declares what it can be told
// and reads what it was told.

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "tessera/base/time.hpp"

namespace tessera {

enum class OptionType : std::uint8_t { boolean, integer, floating, string, size, duration };

[[nodiscard]] std::string_view option_type_name(OptionType t) noexcept;
[[nodiscard]] std::optional<OptionType> parse_option_type(std::string_view name) noexcept;

struct OptionSpec {
  std::string name;
  OptionType type = OptionType::string;
  std::optional<std::string> default_value;  // nullopt: the option is required
  std::string help;
  std::vector<std::string> choices;  // non-empty: the value must be one of these
  // Inclusive bounds in the type's syntax, for int, float, size and duration options; nullopt:
  // unbounded on that side. Enforced wherever a value is validated, so a plugin never sees a
  // value outside them.
  std::optional<std::string> minimum{};
  std::optional<std::string> maximum{};
};

// Checks `text` against `spec` (type syntax, choices, range). Returns an error message or
// nullopt.
// Syntax: bool true/false/yes/no/on/off/1/0; size an integer with optional K/M/G/KiB/MiB/GiB
// (powers of 1024) or B; duration an integer or decimal with ms/s/m/h (bare numbers: seconds).
// int is a signed 64-bit whole number: out-of-range text is an error, never wrapped.
[[nodiscard]] std::optional<std::string> validate_option_value(const OptionSpec& spec,
                                                               std::string_view text);

// Checks the range of a spec itself: bounds only on ordered types, each in the type's syntax,
// minimum not above maximum. Returns an error message or nullopt.
[[nodiscard]] std::optional<std::string> option_range_error(const OptionSpec& spec);

// The resolved options of one section, every value already validated against its spec.
// Immutable and cheap to copy; thread-safe to read.
class Options {
 public:
  Options() = default;
  Options(std::string section, std::vector<OptionSpec> specs,
          std::map<std::string, std::string> values);

  [[nodiscard]] const std::string& section() const noexcept { return section_; }
  [[nodiscard]] const std::vector<OptionSpec>& specs() const noexcept { return specs_; }
  [[nodiscard]] const std::map<std::string, std::string>& values() const noexcept {
    return values_;
  }

  // Typed getters; throw ConfigError if the key is not in the schema or has the wrong type.
  [[nodiscard]] bool get_bool(const std::string& key) const;
  [[nodiscard]] std::int64_t get_int(const std::string& key) const;
  [[nodiscard]] double get_float(const std::string& key) const;
  [[nodiscard]] const std::string& get_string(const std::string& key) const;
  [[nodiscard]] std::uint64_t get_size(const std::string& key) const;  // bytes
  [[nodiscard]] Duration get_duration(const std::string& key) const;

 private:
  [[nodiscard]] const std::string& raw(const std::string& key, OptionType expected) const;
  std::string section_;
  std::vector<OptionSpec> specs_;
  std::map<std::string, std::string> values_;
};

// Parsers shared by Options and the config (throw ConfigError on bad syntax).
[[nodiscard]] bool parse_bool(std::string_view text);
[[nodiscard]] std::uint64_t parse_size(std::string_view text);
[[nodiscard]] Duration parse_duration(std::string_view text);

}  // namespace tessera
