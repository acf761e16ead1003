#pragma once
// The three sources of settings (file, environment, flags), read into one uniform list.

#include <filesystem>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <vector>

namespace tessera::detail {

// One value from one source, not yet validated.
struct Setting {
  std::string section;
  std::string key;
  std::string value;
  std::string origin;  // "FILE:LINE", "environment TESSERA_X_Y", "flag --x.y"
};

// Entries of an INI file; relative folders in plugins.path become relative to the file.
[[nodiscard]] std::vector<Setting> file_settings(const std::filesystem::path& file);

// The variable that sets option section.key: TESSERA_ + upper case, '.' and '-' → '_'.
[[nodiscard]] std::string environment_name(const std::string& section, const std::string& key);

// Launcher and search-path variables that share the TESSERA_ prefix but are not options.
[[nodiscard]] bool is_reserved_environment_name(const std::string& name);

// The process environment, or `override` when given (tests).
[[nodiscard]] std::map<std::string, std::string> environment_snapshot(
    const std::optional<std::map<std::string, std::string>>& override);

// Parses "--section.key=value" / "--section.key value" with Boost.Program_options. `known`
// holds every "section.key" the schemas declare; a flag outside it comes back as a Setting all
// the same, so that the caller reports it with the same suggestions as a file's unknown key.
[[nodiscard]] std::vector<Setting> flag_settings(const std::vector<std::string>& flags,
                                                 const std::set<std::string>& known);

// The value of plugins.path in `flags` (either form), if present, without full parsing: it is
// needed before the plugins, and so the set of known flags, are known.
[[nodiscard]] std::optional<std::string> find_plugins_path_flag(
    const std::vector<std::string>& flags);

}  // namespace tessera::detail
