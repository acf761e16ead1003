#pragma once
// Validation of a plugin descriptor, field by field, before any function of the plugin runs.

#include <filesystem>

#include "tessera/plugin/plugin_abi.h"
#include "tessera/registry/registry.hpp"

namespace tessera::detail {

// Returns the descriptor's contents as a PluginInfo. Throws PluginError "FILE: FIELD ..." at
// the first field that is missing, malformed or incompatible with this libtessera.
[[nodiscard]] PluginInfo check_descriptor(const std::filesystem::path& file,
                                          const tessera_plugin_descriptor& descriptor);

// Plugin names, aliases: a lower-case letter, then lower-case letters, digits, '_' or '-'.
[[nodiscard]] bool is_valid_plugin_name(std::string_view name) noexcept;

}  // namespace tessera::detail
