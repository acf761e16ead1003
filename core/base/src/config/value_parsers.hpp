#pragma once
// Non-throwing parsers behind parse_bool/parse_size/parse_duration and the typed getters.

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include "tessera/plugin/store.hpp"

namespace tessera::detail {

inline constexpr const char* kSizeSyntax =
    "(a whole number of bytes with an optional B, K/KiB, M/MiB, G/GiB or T/TiB suffix, "
    "powers of 1024, e.g. 64MiB)";
inline constexpr const char* kDurationSyntax =
    "(a number with an optional ms, s, m or h suffix, bare numbers are seconds, whole "
    "milliseconds only, e.g. 300s or 1.5m)";

[[nodiscard]] std::optional<std::string> bool_syntax_error(std::string_view text);
[[nodiscard]] std::optional<std::int64_t> to_int(std::string_view text) noexcept;
[[nodiscard]] std::optional<double> to_float(std::string_view text) noexcept;  // finite only
[[nodiscard]] std::optional<std::uint64_t> to_size(std::string_view text) noexcept;
[[nodiscard]] std::optional<Duration> to_duration(std::string_view text) noexcept;

}  // namespace tessera::detail
