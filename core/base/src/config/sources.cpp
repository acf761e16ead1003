#include "config/sources.hpp"

#include <algorithm>

#include "config/ini_file.hpp"
#include "tessera/base/error.hpp"
#include "tessera/registry/registry.hpp"

extern char** environ;  // NOLINT: POSIX declares it nowhere in a header

namespace tessera::detail {

namespace {

constexpr const char* kReservedNames[] = {
    "TESSERA_RANK",       "TESSERA_WORLD_SIZE",  "TESSERA_LOCAL_RANK",  "TESSERA_LOCAL_WORLD_SIZE",
    "TESSERA_STORE_ADDR", "TESSERA_STORE_TOKEN", "TESSERA_PLUGIN_PATH", "TESSERA_NODE_RANK",
    "TESSERA_NNODES",     "TESSERA_WORKER_ID",   "TESSERA_STORE_URL",
};
constexpr std::string_view kReservedPrefix = "TESSERA_LAUNCH_";

std::string relative_to(const std::filesystem::path& base, const std::string& colon_list) {
  std::string out;
  for (auto entry : PluginRegistry::split_folder_list(colon_list)) {
    if (entry.is_relative()) entry = (base / entry).lexically_normal();
    out += (out.empty() ? "" : ":") + entry.string();
  }
  return out;
}

}  // namespace

bool is_path_option(std::string_view key) noexcept {
  return key == "path" || key.ends_with("_dir") || key.ends_with("_file") || key.ends_with("_path");
}

namespace {

// Brings "--k v" to "--k=v" and refuses anything that is not a flag, before program_options
// sees it: its own messages for a stray word do not say which word.
std::vector<std::string> normalized_flags(const std::vector<std::string>& flags) {
  std::vector<std::string> out;
  for (std::size_t i = 0; i < flags.size(); ++i) {
    const std::string& flag = flags[i];
    if (!flag.starts_with("--") || flag.size() == 2) {
      throw ConfigError("argument '" + flag + "' is not a --section.key=value flag");
    }
    if (flag.find('=') != std::string::npos) {
      out.push_back(flag);
    } else if (i + 1 < flags.size() && !flags[i + 1].starts_with("--")) {
      out.push_back(flag + "=" + flags[++i]);
    } else {
      throw ConfigError("flag " + flag + " has no value (write " + flag + "=VALUE)");
    }
  }
  return out;
}

}  // namespace

std::vector<Setting> file_settings(const std::filesystem::path& file) {
  std::vector<Setting> settings;
  auto ini = read_ini_file(file);
  for (auto& header : ini.sections) {
    settings.push_back(
        {std::move(header.name), {}, {}, file.string() + ":" + std::to_string(header.line)});
  }
  for (auto& entry : ini.entries) {
    if (entry.section == "plugins" && entry.key == "path") {
      entry.value = relative_to(file.parent_path(), entry.value);
    } else if (is_path_option(entry.key) && !entry.value.empty()) {
      const std::filesystem::path path(entry.value);
      if (path.is_relative()) entry.value = (file.parent_path() / path).lexically_normal().string();
    }
    settings.push_back({std::move(entry.section), std::move(entry.key), std::move(entry.value),
                        file.string() + ":" + std::to_string(entry.line)});
  }
  return settings;
}

std::string environment_name(const std::string& section, const std::string& key) {
  std::string name = "TESSERA_" + section + "_" + key;
  for (char& c : name) {
    if (c == '.' || c == '-') c = '_';
    if (c >= 'a' && c <= 'z') c = static_cast<char>(c - 'a' + 'A');
  }
  return name;
}

bool is_reserved_environment_name(const std::string& name) {
  return name.starts_with(kReservedPrefix) ||
         std::find(std::begin(kReservedNames), std::end(kReservedNames), name) !=
             std::end(kReservedNames);
}

std::map<std::string, std::string> environment_snapshot(
    const std::optional<std::map<std::string, std::string>>& override) {
  if (override) return *override;
  std::map<std::string, std::string> env;
  for (char** entry = environ; entry != nullptr && *entry != nullptr; ++entry) {
    const std::string_view text(*entry);
    const auto eq = text.find('=');
    if (eq != std::string_view::npos) env.emplace(text.substr(0, eq), text.substr(eq + 1));
  }
  return env;
}

std::vector<Setting> flag_settings(const std::vector<std::string>& flags) {
  // normalized_flags leaves only "--section.key=value"; the value is everything after the first
  // '=', and may be empty ("--train.checkpoint_dir=" clears a string option).
  std::vector<Setting> settings;
  for (const auto& text : normalized_flags(flags)) {
    const auto eq = text.find('=');
    const std::string full = text.substr(2, eq - 2);
    const std::string flag = "flag --" + full;
    const auto dot = full.rfind('.');
    if (dot == std::string::npos || dot == 0 || dot + 1 == full.size()) {
      throw ConfigError(flag + ": expected --section.key=value");
    }
    settings.push_back({full.substr(0, dot), full.substr(dot + 1), text.substr(eq + 1), flag});
  }
  return settings;
}

std::optional<std::string> find_plugins_path_flag(const std::vector<std::string>& flags) {
  std::optional<std::string> value;
  for (std::size_t i = 0; i < flags.size(); ++i) {
    if (flags[i].starts_with("--plugins.path=")) {
      value = flags[i].substr(std::string_view("--plugins.path=").size());
    } else if (flags[i] == "--plugins.path" && i + 1 < flags.size()) {
      value = flags[++i];
    }
  }
  return value;
}

}  // namespace tessera::detail
