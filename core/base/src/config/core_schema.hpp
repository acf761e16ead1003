#pragma once
// The core options whose value names a plugin, so the config can check the name exists.

#include <optional>
#include <string_view>

#include "tessera/plugin/plugin_kind.hpp"

namespace tessera::detail {

// The kind of plugin that core option section.key selects, e.g. runtime.transport → transport.
[[nodiscard]] std::optional<PluginKind> selected_plugin_kind(std::string_view section,
                                                             std::string_view key) noexcept;

}  // namespace tessera::detail
