#pragma once
// Which store a launched worker meets the others in when its launcher names one
// (TESSERA_STORE_URL), against what the config's runtime.store says.

#include <map>
#include <optional>
#include <string>

#include "tessera/config/config.hpp"
#include "tessera/registry/registry.hpp"
#include "tessera/transport_kit/launch_env.hpp"

namespace tessera::detail {

struct LauncherStore {
  std::string plugin;                          // the store plugin that serves its URL
  std::map<std::string, std::string> options;  // the values the launcher's URL sets
};

// None when `launch` carries no store URL. Otherwise the launcher's store wins over a
// runtime.store left at its default, and over `tcp` whose host and port no source set (that
// has always meant "the launcher's store"); a runtime.store naming the launcher's plugin keeps
// its other options. Throws ConfigError naming both sides when the config names another store,
// or sets an option that locates the store (those the store plugin reads from its URL) to
// another value, and for a malformed TESSERA_STORE_URL.
[[nodiscard]] std::optional<LauncherStore> launcher_store(const Config& config,
                                                          const PluginRegistry& registry,
                                                          const LaunchInfo& launch);

}  // namespace tessera::detail
