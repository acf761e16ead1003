// The text syntax of option values, shared by validate_option_value, Options and the config.
#include "config/value_parsers.hpp"

#include <charconv>
#include <cmath>
#include <limits>
#include <string>

#include "tessera/base/error.hpp"
#include "tessera/plugin/options.hpp"

namespace tessera {

namespace {

std::string lower(std::string_view text) {
  std::string out(text);
  for (char& c : out) {
    if (c >= 'A' && c <= 'Z') c = static_cast<char>(c - 'A' + 'a');
  }
  return out;
}

// Splits "64MiB" into the number "64" and the unit "MiB"; the number may carry a fraction.
std::pair<std::string_view, std::string_view> split_unit(std::string_view text) {
  std::size_t i = 0;
  while (i < text.size() && ((text[i] >= '0' && text[i] <= '9') || text[i] == '.')) ++i;
  return {text.substr(0, i), text.substr(i)};
}

}  // namespace

namespace detail {

std::optional<std::string> bool_syntax_error(std::string_view text) {
  const std::string t = lower(text);
  if (t == "true" || t == "yes" || t == "on" || t == "1" || t == "false" || t == "no" ||
      t == "off" || t == "0") {
    return std::nullopt;
  }
  return "'" + std::string(text) + "' is not a bool (true/false, yes/no, on/off, 1/0)";
}

std::optional<std::int64_t> to_int(std::string_view text) noexcept {
  if (!text.empty() && text.front() == '+') text.remove_prefix(1);
  std::int64_t value = 0;
  const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), value);
  if (text.empty() || ec != std::errc() || end != text.data() + text.size()) return std::nullopt;
  return value;
}

std::optional<double> to_float(std::string_view text) noexcept {
  if (!text.empty() && text.front() == '+') text.remove_prefix(1);
  double value = 0;
  const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), value);
  if (text.empty() || ec != std::errc() || end != text.data() + text.size() ||
      !std::isfinite(value)) {
    return std::nullopt;
  }
  return value;
}

std::optional<std::uint64_t> to_size(std::string_view text) noexcept {
  const auto [number, unit] = split_unit(text);
  std::uint64_t value = 0;
  const auto [end, ec] = std::from_chars(number.data(), number.data() + number.size(), value);
  if (number.empty() || ec != std::errc() || end != number.data() + number.size()) {
    return std::nullopt;
  }
  const std::string u = lower(unit);
  unsigned shift = 0;
  if (u.empty() || u == "b") {
    shift = 0;
  } else if (u == "k" || u == "kib") {
    shift = 10;
  } else if (u == "m" || u == "mib") {
    shift = 20;
  } else if (u == "g" || u == "gib") {
    shift = 30;
  } else if (u == "t" || u == "tib") {
    shift = 40;
  } else {
    return std::nullopt;
  }
  if (value > (std::numeric_limits<std::uint64_t>::max() >> shift)) return std::nullopt;
  return value << shift;
}

std::optional<Duration> to_duration(std::string_view text) noexcept {
  const auto [number, unit] = split_unit(text);
  double value = 0;
  const auto [end, ec] = std::from_chars(number.data(), number.data() + number.size(), value);
  if (number.empty() || ec != std::errc() || end != number.data() + number.size()) {
    return std::nullopt;
  }
  double ms_per_unit = 0;
  if (unit == "ms") {
    ms_per_unit = 1;
  } else if (unit.empty() || unit == "s") {
    ms_per_unit = 1e3;
  } else if (unit == "m" || unit == "min") {
    ms_per_unit = 60e3;
  } else if (unit == "h") {
    ms_per_unit = 3600e3;
  } else {
    return std::nullopt;
  }
  const double ms = std::round(value * ms_per_unit);
  // Durations are milliseconds; a value that rounds to a different number of them would
  // silently change meaning (0.4ms would become 0), so it is refused rather than rounded.
  if (std::abs(ms - value * ms_per_unit) > 1e-6 || ms > 1e15) return std::nullopt;
  return Duration(static_cast<Duration::rep>(ms));
}

}  // namespace detail

bool parse_bool(std::string_view text) {
  if (auto error = detail::bool_syntax_error(text)) throw ConfigError(*error);
  const std::string t = lower(text);
  return t == "true" || t == "yes" || t == "on" || t == "1";
}

std::uint64_t parse_size(std::string_view text) {
  if (auto value = detail::to_size(text)) return *value;
  throw ConfigError("'" + std::string(text) + "' is not a size " + detail::kSizeSyntax);
}

Duration parse_duration(std::string_view text) {
  if (auto value = detail::to_duration(text)) return *value;
  throw ConfigError("'" + std::string(text) + "' is not a duration " + detail::kDurationSyntax);
}

}  // namespace tessera
