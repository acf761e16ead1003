// Fuzz target: an arbitrary INI file through Config::load, the path of `tessera train --config`
// and `tessera config check`: the INI reader, the three sources and every core option's
// validation. A ConfigError is the right answer to bad input; any other exception, a crash or a
// sanitizer report is a finding.

#include <cstddef>
#include <cstdint>

#include "fuzz_support.hpp"
#include "tessera/base/error.hpp"
#include "tessera/config/config.hpp"
#include "tessera/registry/registry.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  static const tessera::fuzz::ScratchFolder scratch("config");
  static const auto no_plugins = [] {
    auto folder = scratch.path() / "plugins";
    std::filesystem::create_directories(folder);
    return folder;
  }();

  tessera::ConfigSources sources;
  sources.file = scratch.write("fuzz.ini", tessera::fuzz::as_text(data, size));
  sources.use_environment = false;
  // The file may name any plugins.path; the flag wins, so no library outside the test is
  // ever loaded (and the default search path is not scanned).
  sources.flags = {"--plugins.path=" + no_plugins.string()};
  tessera::PluginRegistry registry;
  try {
    const auto path = tessera::Config::plugin_search_path(sources);
    registry.scan_named(path.named, path.named_origin);
    const auto config = tessera::Config::load(sources, registry);
    for (const auto& name : config.section_names()) (void)config.section(name);
  } catch (const tessera::ConfigError&) {
  }
  return 0;
}
