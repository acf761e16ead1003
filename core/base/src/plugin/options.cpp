#include "tessera/plugin/options.hpp"

#include <algorithm>
#include <utility>

#include "config/value_parsers.hpp"
#include "tessera/base/error.hpp"

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

// -1, 0 or 1 as a is below, equal to or above b; nullopt when either does not parse.
template <class T>
std::optional<int> compare_parsed(std::optional<T> a, std::optional<T> b) {
  if (!a || !b) return std::nullopt;
  return *a < *b ? -1 : (*b < *a ? 1 : 0);
}

std::optional<int> compare_values(OptionType type, std::string_view a, std::string_view b) {
  switch (type) {
    case OptionType::integer: return compare_parsed(detail::to_int(a), detail::to_int(b));
    case OptionType::floating: return compare_parsed(detail::to_float(a), detail::to_float(b));
    case OptionType::size: return compare_parsed(detail::to_size(a), detail::to_size(b));
    case OptionType::duration:
      return compare_parsed(detail::to_duration(a), detail::to_duration(b));
    case OptionType::boolean:
    case OptionType::string: return std::nullopt;
  }
  return std::nullopt;
}

std::optional<std::string> range_error(const OptionSpec& spec, std::string_view text) {
  const auto describe = [&] {
    if (spec.minimum && spec.maximum) return "in [" + *spec.minimum + ", " + *spec.maximum + "]";
    if (spec.minimum) return "at least " + *spec.minimum;
    return "at most " + *spec.maximum;
  };
  if (spec.minimum && compare_values(spec.type, text, *spec.minimum).value_or(0) < 0) {
    return quoted(text) + " is out of range: must be " + describe();
  }
  if (spec.maximum && compare_values(spec.type, text, *spec.maximum).value_or(0) > 0) {
    return quoted(text) + " is out of range: must be " + describe();
  }
  return std::nullopt;
}

}  // namespace

std::optional<std::string> option_range_error(const OptionSpec& spec) {
  const bool ranged = spec.minimum || spec.maximum;
  if (!ranged) return std::nullopt;
  if (spec.type == OptionType::boolean || spec.type == OptionType::string) {
    return "a " + std::string(option_type_name(spec.type)) + " option cannot have a range";
  }
  for (const auto* bound : {&spec.minimum, &spec.maximum}) {
    if (*bound) {
      if (auto error = type_syntax_error(spec.type, **bound)) return "range bound " + *error;
    }
  }
  if (spec.minimum && spec.maximum &&
      compare_values(spec.type, *spec.minimum, *spec.maximum).value_or(0) > 0) {
    return "minimum " + *spec.minimum + " is above maximum " + *spec.maximum;
  }
  return std::nullopt;
}

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
  return range_error(spec, text);
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
