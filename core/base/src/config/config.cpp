#include "tessera/config/config.hpp"

#include <algorithm>

#include "config/core_schema.hpp"
#include "config/sources.hpp"
#include "tessera/base/error.hpp"

namespace tessera {

namespace {

using detail::Setting;

// Every section the run knows: the core's, the host's layers' and one per loaded plugin.
struct Schemas {
  SectionSchemas sections;
  const PluginRegistry& registry;

  Schemas(const PluginRegistry& r, const SectionSchemas& layers)
      : sections(Config::core_schema()), registry(r) {
    for (const auto* info : registry.plugins()) {
      sections[std::string(plugin_kind_name(info->kind)) + "." + info->name] = info->options;
    }
    for (const auto& [name, specs] : layers) {
      if (!sections.emplace(name, specs).second) {
        throw InvalidArgument("a layer's config section [" + name +
                              "] has the name of a core or plugin section");
      }
    }
  }

  [[nodiscard]] std::vector<std::string> names() const {
    std::vector<std::string> out;
    for (const auto& [name, specs] : sections) out.push_back(name);
    return out;
  }
};

std::string unknown_section_message(const std::string& section, const Schemas& schemas) {
  const auto dot = section.find('.');
  if (dot != std::string::npos) {
    const auto kind = parse_plugin_kind(section.substr(0, dot));
    const std::string name = section.substr(dot + 1);
    if (kind) {
      if (const auto* info = schemas.registry.try_find(*kind, name)) {
        return "[" + section + "] names the alias '" + name + "'; options go under the plugin's " +
               "own name, [" + section.substr(0, dot) + "." + info->name + "]";
      }
    }
  }
  std::string message = "unknown section [" + section + "]";
  if (auto near = nearest_name(section, schemas.names())) {
    message += "; did you mean [" + *near + "]?";
  }
  if (dot != std::string::npos && parse_plugin_kind(section.substr(0, dot))) {
    message += " (no " + section.substr(0, dot) + " plugin named '" + section.substr(dot + 1) +
               "' is loaded)";
  }
  return message;
}

std::string unknown_key_message(const std::string& section, const std::string& key,
                                const std::vector<OptionSpec>& specs) {
  std::vector<std::string> keys;
  std::string list;
  for (const auto& spec : specs) {
    keys.push_back(spec.name);
    list += (list.empty() ? "" : ", ") + spec.name;
  }
  std::string message = "[" + section + "] has no option '" + key + "'";
  if (auto near = nearest_name(key, keys)) message += "; did you mean '" + *near + "'?";
  message += list.empty() ? " (it has no options)" : " (options: " + list + ")";
  return message;
}

// Checks one setting against the schemas; the message starts with where the value came from.
void check_setting(const Setting& s, const Schemas& schemas) {
  const std::string where = s.origin + ": ";
  const auto section = schemas.sections.find(s.section);
  if (section == schemas.sections.end()) {
    throw ConfigError(where + unknown_section_message(s.section, schemas));
  }
  if (s.key.empty()) return;  // a file's [section] header: the section exists
  const auto& specs = section->second;
  const auto spec = std::find_if(specs.begin(), specs.end(),
                                 [&](const OptionSpec& o) { return o.name == s.key; });
  if (spec == specs.end()) throw ConfigError(where + unknown_key_message(s.section, s.key, specs));
  if (auto error = validate_option_value(*spec, s.value)) {
    throw ConfigError(where + "[" + s.section + "] " + s.key + ": " + *error);
  }
  if (auto kind = detail::selected_plugin_kind(s.section, s.key)) {
    try {
      (void)schemas.registry.find(*kind, s.value);
    } catch (const ConfigError& e) {
      throw ConfigError(where + "[" + s.section + "] " + s.key + ": " + e.what());
    }
  }
}

// The TESSERA_* variables that are options, each mapped to its section and key; an unknown one
// is an error rather than silently ignored, since a misspelt variable would otherwise change
// nothing and nobody would notice.
std::vector<Setting> environment_settings(const std::map<std::string, std::string>& env,
                                          const Schemas& schemas) {
  std::map<std::string, std::pair<std::string, std::string>> by_name;
  for (const auto& [section, specs] : schemas.sections) {
    for (const auto& spec : specs) {
      by_name.emplace(detail::environment_name(section, spec.name), std::pair{section, spec.name});
    }
  }
  std::vector<Setting> settings;
  for (const auto& [name, value] : env) {
    if (!name.starts_with("TESSERA_") || detail::is_reserved_environment_name(name)) continue;
    const auto option = by_name.find(name);
    if (option == by_name.end()) {
      std::vector<std::string> known;
      for (const auto& [known_name, unused] : by_name) known.push_back(known_name);
      std::string message = "environment variable " + name + " is not a tessera option";
      if (auto near = nearest_name(name, known)) message += "; did you mean " + *near + "?";
      throw ConfigError(message + " (see docs/config.md for the TESSERA_SECTION_KEY mapping)");
    }
    settings.push_back({option->second.first, option->second.second, value, "environment " + name});
  }
  return settings;
}

}  // namespace

namespace {

// The folders plugins.path names, and where: file, then environment, then flag (later wins).
struct NamedFolders {
  std::vector<std::filesystem::path> dirs;
  std::string origin;
};

NamedFolders named_plugin_folders(const std::vector<Setting>& from_file,
                                  const std::map<std::string, std::string>& env,
                                  const std::vector<std::string>& flags) {
  std::optional<std::string> plugin_path;
  std::string origin;
  for (const auto& s : from_file) {
    if (s.section == "plugins" && s.key == "path") {
      plugin_path = s.value;
      origin = s.origin + " (plugins.path)";
    }
  }
  const std::string env_name = detail::environment_name("plugins", "path");
  if (auto it = env.find(env_name); it != env.end()) {
    plugin_path = it->second;
    origin = "environment " + env_name;
  }
  if (auto flag = detail::find_plugins_path_flag(flags)) {
    plugin_path = *flag;
    origin = "flag --plugins.path";
  }
  if (!plugin_path) return {};
  return {PluginRegistry::split_folder_list(*plugin_path), origin};
}

std::map<std::string, std::string> environment_of(const ConfigSources& sources) {
  return sources.use_environment ? detail::environment_snapshot(sources.environment)
                                 : std::map<std::string, std::string>{};
}

}  // namespace

PluginSearchPath Config::plugin_search_path(const ConfigSources& sources) {
  std::vector<Setting> from_file;
  if (sources.file) from_file = detail::file_settings(*sources.file);
  auto named = named_plugin_folders(from_file, environment_of(sources), sources.flags);
  return {PluginRegistry::default_search_path(), std::move(named.dirs), std::move(named.origin)};
}

Config Config::load(const ConfigSources& sources, const PluginRegistry& registry,
                    const SectionSchemas& layers) {
  std::vector<Setting> from_file;
  if (sources.file) from_file = detail::file_settings(*sources.file);
  const auto env = environment_of(sources);

  // plugins.path decides which plugin sections exist; the host scanned it before (the config
  // only reads): a folder it did not scan would make this config's plugins unknown names.
  const auto& scanned = registry.scanned_directories();
  const auto named = named_plugin_folders(from_file, env, sources.flags);
  for (const auto& dir : named.dirs) {
    if (std::find(scanned.begin(), scanned.end(), dir) == scanned.end()) {
      throw InvalidArgument(named.origin + " names the plugin folder '" + dir.string() +
                            "', which the registry has not scanned: scan "
                            "Config::plugin_search_path(sources) before Config::load");
    }
  }

  const Schemas schemas(registry, layers);
  std::vector<Setting> settings = std::move(from_file);
  for (auto& s : environment_settings(env, schemas)) settings.push_back(std::move(s));
  for (auto& s : detail::flag_settings(sources.flags)) settings.push_back(std::move(s));

  Config config;
  std::map<std::string, std::map<std::string, std::string>> values;
  for (const auto& s : settings) {
    check_setting(s, schemas);
    if (s.key.empty()) continue;
    values[s.section][s.key] = s.value;  // file, then environment, then flags: later wins
    config.origins_[s.section][s.key] = ValueOrigin{s.origin};
  }
  for (const auto& [section, specs] : schemas.sections) {
    for (const auto& spec : specs)
      config.origins_[section].try_emplace(spec.name, ValueOrigin{"default"});
    config.sections_.emplace(section, Options(section, specs, values[section]));
  }
  return config;
}

const Options& Config::section(const std::string& name) const {
  if (auto it = sections_.find(name); it != sections_.end()) return it->second;
  std::string message = "the config has no section [" + name + "]";
  if (auto near = nearest_name(name, section_names())) message += "; did you mean [" + *near + "]?";
  throw ConfigError(message);
}

const Options& Config::plugin(PluginKind kind, const std::string& name) const {
  return section(std::string(plugin_kind_name(kind)) + "." + name);
}

bool Config::has_section(const std::string& name) const {
  return sections_.count(name) != 0;
}

std::vector<std::string> Config::section_names() const {
  std::vector<std::string> names;
  for (const auto& [name, options] : sections_) names.push_back(name);
  return names;
}

const ValueOrigin& Config::origin(const std::string& section_name, const std::string& key) const {
  const auto section_it = origins_.find(section_name);
  if (section_it != origins_.end()) {
    if (auto it = section_it->second.find(key); it != section_it->second.end()) return it->second;
  }
  throw ConfigError("the config has no option [" + section_name + "] " + key);
}

}  // namespace tessera
