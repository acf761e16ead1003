#include "tessera/options.hpp"

#include <algorithm>
#include <utility>

#include "config/value_parsers.hpp"
#include "tessera/error.hpp"

namespace tessera {

namespace {

constexpr std::pair<OptionType, std::string_view> kTypeNames[] = {
    {OptionType::boolean, "bool"},   {OptionType::integer, "int"},
    {OptionType::floating, "float"}, {OptionType::string, "string"},
    {OptionType::size, "size"},      {OptionType::duration, "duration"},
};

std::string quoted(std::string_view text) {
  return "'" + std::string(text) + "'";
}

std::string join_choices(const std::vector<std::string>& choices) {
  std::string out;
  for (const auto& c : choices) out += (out.empty() ? "" : "|") + c;
  return out;
}

std::optional<std::string> type_syntax_error(OptionType type, std::string_view text) {
  switch (type) {
    case OptionType::boolean: return detail::bool_syntax_error(text);
    case OptionType::integer:
      if (detail::to_int(text)) return std::nullopt;
      return quoted(text) + " is not an int (a whole number such as 42 or -1)";
    case OptionType::floating:
      if (detail::to_float(text)) return std::nullopt;
      return quoted(text) + " is not a float (a finite number such as 0.5 or 1e-3)";
    case OptionType::string: return std::nullopt;
    case OptionType::size:
      if (detail::to_size(text)) return std::nullopt;
      return quoted(text) + " is not a size " + detail::kSizeSyntax;
    case OptionType::duration:
      if (detail::to_duration(text)) return std::nullopt;
      return quoted(text) + " is not a duration " + detail::kDurationSyntax;
  }
  return "unknown option type";
}

}  // namespace

std::string_view option_type_name(OptionType t) noexcept {
  for (const auto& [type, name] : kTypeNames) {
    if (type == t) return name;
  }
  return "unknown";
}

std::optional<OptionType> parse_option_type(std::string_view name) noexcept {
  for (const auto& [type, type_name] : kTypeNames) {
    if (type_name == name) return type;
  }
  return std::nullopt;
}

std::optional<std::string> validate_option_value(const OptionSpec& spec, std::string_view text) {
  if (auto error = type_syntax_error(spec.type, text)) return error;
  if (!spec.choices.empty() &&
      std::find(spec.choices.begin(), spec.choices.end(), text) == spec.choices.end()) {
    return quoted(text) + " is not one of " + join_choices(spec.choices);
  }
  return std::nullopt;
}

Options::Options(std::string section, std::vector<OptionSpec> specs,
                 std::map<std::string, std::string> values)
    : section_(std::move(section)), specs_(std::move(specs)), values_(std::move(values)) {
  for (const auto& [key, value] : values_) {
    const auto spec = std::find_if(specs_.begin(), specs_.end(),
                                   [&name = key](const OptionSpec& s) { return s.name == name; });
    if (spec == specs_.end()) throw ConfigError("[" + section_ + "] has no option " + quoted(key));
    if (auto error = validate_option_value(*spec, value)) {
      throw ConfigError("[" + section_ + "] " + key + ": " + *error);
    }
  }
  // Defaults are filled in here so that a getter never has to know where a value came from.
  for (const auto& spec : specs_) {
    if (!values_.contains(spec.name) && spec.default_value)
      values_[spec.name] = *spec.default_value;
  }
}

const std::string& Options::raw(const std::string& key, OptionType expected) const {
  const auto spec = std::find_if(specs_.begin(), specs_.end(),
                                 [&](const OptionSpec& s) { return s.name == key; });
  if (spec == specs_.end()) throw ConfigError("[" + section_ + "] has no option " + quoted(key));
  if (spec->type != expected) {
    throw ConfigError("[" + section_ + "] " + key + " is a " +
                      std::string(option_type_name(spec->type)) + " option, read as a " +
                      std::string(option_type_name(expected)));
  }
  const auto value = values_.find(key);
  if (value == values_.end()) {
    throw ConfigError("[" + section_ + "] " + key + " is required and was not set");
  }
  return value->second;
}

bool Options::get_bool(const std::string& key) const {
  return parse_bool(raw(key, OptionType::boolean));
}

std::int64_t Options::get_int(const std::string& key) const {
  return *detail::to_int(raw(key, OptionType::integer));  // validated on construction
}

double Options::get_float(const std::string& key) const {
  return *detail::to_float(raw(key, OptionType::floating));
}

const std::string& Options::get_string(const std::string& key) const {
  return raw(key, OptionType::string);
}

std::uint64_t Options::get_size(const std::string& key) const {
  return parse_size(raw(key, OptionType::size));
}

Duration Options::get_duration(const std::string& key) const {
  return parse_duration(raw(key, OptionType::duration));
}

}  // namespace tessera
