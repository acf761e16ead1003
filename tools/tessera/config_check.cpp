#include "config_check.hpp"

#include <algorithm>
#include <iostream>

#include "config_flags.hpp"
#include "tessera/config/config.hpp"
#include "tessera/elastic/elastic_options.hpp"
#include "tessera/runtime/run_check.hpp"
#include "usage_error.hpp"

namespace tessera::cli {

namespace {

constexpr const char* kUsage =
    R"(usage: tessera config check FILE|--config FILE [--all] [-n N] [--section.key=value ...]

Reads FILE, then the TESSERA_* environment variables, then the flags (later sources win),
validates every value against the core's and the plugins' schemas (types, choices, ranges),
creates the run's plugins once to let them check their options, checks the values against
each other and the host (the schedule against the run's steps, the data set against the
model, the model and the ranks against the host), and prints each resolved value with its
origin: FILE:LINE, environment VARIABLE, flag --section.key or default, then the run's figures.
Core sections are always shown; a plugin section when any of its values is set (--all: every
section). --config FILE and -n N ([runtime] world_size) are taken as `tessera train` takes
them, so a train command line checks unchanged. Exits 2 with the first error, naming where the
bad value came from. A config that passes here is refused by `tessera train` only for what
happens while it runs.
)";

bool is_set_anywhere(const Config& config, const std::string& section) {
  const auto& values = config.section(section).values();
  return std::any_of(values.begin(), values.end(), [&](const auto& entry) {
    return config.origin(section, entry.first).text != "default";
  });
}

int check(std::vector<std::string> args) {
  // `--config FILE`, as `tessera train` names it, is FILE: a train command line checks unchanged.
  if (!args.empty() && args[0].starts_with("--config=")) {
    args[0] = args[0].substr(9);
  } else if (args.size() >= 2 && args[0] == "--config") {
    args.erase(args.begin());
  }
  if (args.empty() || args[0].starts_with("-")) {
    if (!args.empty() && (args[0] == "--help" || args[0] == "-h")) {
      std::cout << kUsage;
      return 0;
    }
    throw UsageError("config check: the config FILE comes first\n" + std::string(kUsage));
  }
  ConfigSources sources;
  sources.file = args[0];
  bool all = false;
  for (std::size_t i = 1; i < args.size(); ++i) {
    if (args[i] == "--all") {
      all = true;
    } else if (args[i] == "-n") {
      // As `tessera train` takes it, so that a train command line checks unchanged.
      if (i + 1 >= args.size()) throw UsageError("config check: -n needs a value (ranks)");
      sources.flags.push_back(world_size_flag("config check", args[++i]));
    } else if (args[i].starts_with("-n") && args[i] != "-n") {
      const auto& a = args[i];
      sources.flags.push_back(world_size_flag("config check", a.substr(a[2] == '=' ? 3 : 2)));
    } else {
      sources.flags.push_back(args[i]);
    }
  }

  PluginRegistry registry;
  registry.scan(Config::plugin_search_path(sources));
  const Config config = Config::load(sources, registry, elastic_sections());
  for (const auto& failure : registry.failures()) {
    std::cerr << (failure.shadowed ? "tessera: note: " : "tessera: warning: ") << failure.reason
              << "\n";
  }
  const RunFigures figures = check_run(config, registry);
  check_elastic_run(config, figures);

  const auto& core = Config::core_schema();
  for (const auto& section : config.section_names()) {
    const bool shown = core.contains(section) || (section == "elastic" && is_elastic(config));
    if (!all && !shown && !is_set_anywhere(config, section)) continue;
    std::cout << "[" << section << "]\n";
    const Options& options = config.section(section);
    std::size_t width = 0;
    for (const auto& spec : options.specs()) width = std::max(width, spec.name.size());
    for (const auto& spec : options.specs()) {
      const auto value = options.values().find(spec.name);
      std::cout << spec.name << std::string(width - spec.name.size(), ' ') << " = "
                << (value == options.values().end() ? "(required, not set)"
                    : value->second.empty()         ? "\"\""
                                                    : value->second)
                << "  # " << config.origin(section, spec.name).text << "\n";
    }
    std::cout << "\n";
  }
  std::cout << "# the run: " << figures.world_size << " rank(s), ";
  if (figures.data_parallel_size != figures.world_size) {
    std::cout << "as " << figures.data_parallel_size << " data-parallel replica(s), ";
  }
  std::cout << figures.train_samples << " training samples, " << figures.steps_per_epoch
            << " steps per epoch, " << figures.total_steps << " steps\n";
  return 0;
}

}  // namespace

int run_config(const std::vector<std::string>& args) {
  if (!args.empty() && args[0] == "check") {
    return check(std::vector<std::string>(args.begin() + 1, args.end()));
  }
  if (!args.empty() && (args[0] == "--help" || args[0] == "-h")) {
    std::cout << kUsage;
    return 0;
  }
  throw UsageError("config: expected 'check'\n" + std::string(kUsage));
}

}  // namespace tessera::cli
