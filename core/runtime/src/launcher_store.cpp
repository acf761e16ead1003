#include "launcher_store.hpp"

#include "tessera/base/error.hpp"
#include "tessera/runtime/store_url.hpp"

namespace tessera::detail {

namespace {

constexpr const char* kVariable = "TESSERA_STORE_URL";

bool set_by_a_source(const Config& config, const std::string& section, const std::string& key) {
  return config.origin(section, key).text != "default";
}

// The value as the config holds it, whatever its type ("" when neither set nor defaulted).
std::string raw_value(const Options& options, const std::string& key) {
  const auto found = options.values().find(key);
  return found == options.values().end() ? std::string() : found->second;
}

}  // namespace

std::optional<LauncherStore> launcher_store(const Config& config, const PluginRegistry& registry,
                                            const LaunchInfo& launch) {
  if (launch.store_url.empty()) return std::nullopt;
  const auto url =
      parse_store_url(registry, launch.store_url, "environment " + std::string(kVariable));
  const std::string given = "the launcher gives this worker the " + url.store + " store " +
                            url.text() + " (" + kVariable + ", from tessera launch --store)";
  const auto configured = config.section("runtime").get_string("store");
  const auto& store_origin = config.origin("runtime", "store").text;
  if (set_by_a_source(config, "runtime", "store") && configured != url.store) {
    const bool tcp_means_launcher = configured == "tcp" &&
                                    !set_by_a_source(config, "store.tcp", "host") &&
                                    !set_by_a_source(config, "store.tcp", "port");
    if (!tcp_means_launcher)
      throw ConfigError(store_origin + ": [runtime] store = " + configured + " (" + store_origin +
                        ") but " + given + "; remove runtime.store (and its server's address) " +
                        "to meet in the launcher's store, or launch with --store naming the " +
                        configured + " store");
  }
  LauncherStore chosen{url.store, url.plugin_options()};
  const std::string section = "store." + url.store;
  if (configured == url.store) {
    const auto& options = config.section(section);
    for (const auto& [key, value] : chosen.options) {
      if (!set_by_a_source(config, section, key) || raw_value(options, key) == value) continue;
      const auto& origin = config.origin(section, key).text;
      throw ConfigError(origin + ": [" + section + "] " + key + " = " + raw_value(options, key) +
                        " (" + origin + ") but " + given + ", where " + key + " = " + value +
                        "; remove " + section + "." + key + " to meet in the launcher's store");
    }
  }
  if (url.scheme == kLauncherStoreScheme && !launch.store_token.empty() &&
      raw_value(config.section(section), "token").empty())
    chosen.options["token"] = launch.store_token;
  return chosen;
}

}  // namespace tessera::detail
