#include <boost/dll/runtime_symbol_info.hpp>
#include <cstdlib>
#include <string_view>

#include "tessera/base/error.hpp"
#include "tessera/registry/registry.hpp"

namespace tessera {

namespace {

// The folder libtessera itself was loaded from, found through a function with internal linkage
// (an inline one such as this_line_location could be interposed by another module's copy), so
// that a relocated install finds the plugins that came with it.
std::optional<std::filesystem::path> library_folder() {
  std::error_code ec;
  auto path = boost::dll::symbol_location(library_folder, ec);
  if (ec || path.empty()) return std::nullopt;
  return std::filesystem::absolute(path, ec).parent_path();
}

}  // namespace

std::vector<std::filesystem::path> PluginRegistry::split_folder_list(std::string_view list) {
  std::vector<std::filesystem::path> dirs;
  while (!list.empty()) {
    const auto colon = list.find(':');
    if (colon != 0) dirs.emplace_back(list.substr(0, colon));
    if (colon == std::string_view::npos) break;
    list.remove_prefix(colon + 1);
  }
  return dirs;
}

std::vector<std::filesystem::path> PluginRegistry::default_search_path() {
  std::vector<std::filesystem::path> dirs;
  if (const char* env = std::getenv("TESSERA_PLUGIN_PATH")) {
    for (auto& dir : split_folder_list(env)) {
      std::error_code ec;
      if (!std::filesystem::is_directory(dir, ec)) {
        throw ConfigError(
            "environment TESSERA_PLUGIN_PATH: plugin folder '" + dir.string() + "' " +
            (std::filesystem::exists(dir, ec) ? "is not a folder" : "does not exist") +
            "; correct the path, or remove it from TESSERA_PLUGIN_PATH");
      }
      dirs.push_back(std::move(dir));
    }
  }
  if (auto folder = library_folder()) dirs.push_back(*folder / "tessera" / "plugins");
  return dirs;
}

}  // namespace tessera
