#pragma once
// Config: the resolved configuration of one run, from an INI file, then TESSERA_* environment
// variables, then --section.key=value flags (later sources win), validated against the core
// schema and every plugin's schema.

#include <filesystem>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "tessera/plugin/options.hpp"
#include "tessera/registry/registry.hpp"

namespace tessera {

struct ConfigSources {
  std::optional<std::filesystem::path> file;  // INI file
  bool use_environment = true;                // read TESSERA_SECTION_KEY variables
  std::vector<std::string> flags;             // "--section.key=value" (or "--section.key value")
  // Environment to read instead of the process's (tests); nullopt reads ::environ.
  std::optional<std::map<std::string, std::string>> environment;
};

// Where a value came from, for messages and for `tessera config check`.
struct ValueOrigin {
  std::string text;  // "default", "FILE:LINE", "environment TESSERA_X_Y", "flag --x.y"
};

// Schemas of sections by name, as the core and each plugin declare their options.
using SectionSchemas = std::map<std::string, std::vector<OptionSpec>>;

// Sections: the core's ([plugins], [runtime], [train]), those of the layers a host builds on
// (the elastic layer's [elastic]: elastic_sections()) and one per plugin, named "KIND.NAME",
// e.g. [transport.local]. Immutable once loaded; thread-safe to read.
class Config {
 public:
  // Where the plugins of a run are: the default search path (TESSERA_PLUGIN_PATH, the folder
  // beside libtessera) and the folders the sources' plugins.path names (file, then environment,
  // then flag; later wins; relative entries of a file relative to its folder). Reads only that
  // option; throws ConfigError for an unreadable file or a missing TESSERA_PLUGIN_PATH folder.
  // A host scans it into its registry before load:
  //   registry.scan(Config::plugin_search_path(sources));
  [[nodiscard]] static PluginSearchPath plugin_search_path(const ConfigSources& sources);

  // Reads the sources and validates every value against the core schema, the `layers`'
  // sections and the schemas of the plugins `registry` holds; scans and creates nothing. Throws
  // ConfigError naming the file and line, the variable, or the flag, with the nearest valid name
  // where one is close, and InvalidArgument when plugins.path names a folder the registry has
  // not scanned or a layer's section has the name of a core or plugin section.
  [[nodiscard]] static Config load(const ConfigSources& sources, const PluginRegistry& registry,
                                   const SectionSchemas& layers = {});

  // The resolved options of a section ("runtime", "transport.local", ...), defaults filled
  // in. For a plugin section not mentioned anywhere, the plugin's defaults.
  [[nodiscard]] const Options& section(const std::string& name) const;
  [[nodiscard]] const Options& plugin(PluginKind kind, const std::string& name) const;
  [[nodiscard]] std::vector<std::string> section_names() const;
  [[nodiscard]] bool has_section(const std::string& name) const;
  [[nodiscard]] const ValueOrigin& origin(const std::string& section, const std::string& key) const;

  // Creates the plugin selected by a core option, e.g. create<Transport>("runtime", "transport").
  template <class Interface>
  [[nodiscard]] std::shared_ptr<Interface> create(const PluginRegistry& registry,
                                                  const std::string& section,
                                                  const std::string& key) const {
    const auto& info =
        registry.find(interface_kind<Interface>::value, this->section(section).get_string(key));
    return registry.create<Interface>(info.name, plugin(info.kind, info.name));
  }

  // The core sections' schemas, for documentation and `tessera config check`.
  [[nodiscard]] static const SectionSchemas& core_schema();

 private:
  std::map<std::string, Options> sections_;
  std::map<std::string, std::map<std::string, ValueOrigin>> origins_;
};

}  // namespace tessera
