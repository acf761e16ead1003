#pragma once
// The three sources of settings (file, environment, flags), read into one uniform list.

#include <filesystem>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <vector>

namespace tessera::detail {

// One value from one source, not yet validated. A file's "[section]" header is a Setting with
// an empty key, so that the section is checked at the header's own line.
struct Setting {
  std::string section;
  std::string key;  // empty: a section header
  std::string value;
  std::string origin;  // "FILE:LINE", "environment TESSERA_X_Y", "flag --x.y"
};

// Whether option `key` names a file or folder: `path`, or a name ending in _dir, _file or _path.
// A relative one written in a config file is relative to that file's folder (docs/config.md).
[[nodiscard]] bool is_path_option(std::string_view key) noexcept;

// Entries of an INI file, and its [section] headers (empty key). Relative paths in path options
// (plugins.path's folders included) become relative to the file's folder.
[[nodiscard]] std::vector<Setting> file_settings(const std::filesystem::path& file);

// The variable that sets option section.key: TESSERA_ + upper case, '.' and '-' → '_'.
[[nodiscard]] std::string environment_name(const std::string& section, const std::string& key);

// Launcher and search-path variables that share the TESSERA_ prefix but are not options.
[[nodiscard]] bool is_reserved_environment_name(const std::string& name);

// The process environment, or `override` when given (tests).
[[nodiscard]] std::map<std::string, std::string> environment_snapshot(
    const std::optional<std::map<std::string, std::string>>& override);

// Parses "--section.key=value" / "--section.key value" (the value may be empty). Every flag
// comes back as a Setting, known or not, so that the caller reports an unknown one with the
// same suggestions as a file's unknown key.
[[nodiscard]] std::vector<Setting> flag_settings(const std::vector<std::string>& flags);

// The value of plugins.path in `flags` (either form), if present, without full parsing: it is
// needed before the plugins, and so the set of known flags, are known.
[[nodiscard]] std::optional<std::string> find_plugins_path_flag(
    const std::vector<std::string>& flags);

}  // namespace tessera::detail
