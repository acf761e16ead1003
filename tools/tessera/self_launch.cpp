#include "self_launch.hpp"

#include <filesystem>
#include <iostream>

#include "tessera/launch/launcher.hpp"

namespace tessera::cli {

int relaunch_as_workers(const std::vector<std::string>& command, int processes,
                        const std::vector<std::string>& args, const PluginRegistry& registry,
                        bool plain_stdout, std::optional<ElasticLaunch> elastic) {
  LaunchOptions launch;
  launch.processes = processes;
  // An elastic job's rank 0 may die: then another worker reports the run.
  launch.rank0_only_output = !elastic;
  launch.elastic = elastic.has_value();
  if (elastic) launch.max_restarts = elastic->max_restarts;
  launch.prefix_stdout = !plain_stdout;
  launch.command = {std::filesystem::read_symlink("/proc/self/exe").string()};
  launch.command.insert(launch.command.end(), command.begin(), command.end());
  launch.command.insert(launch.command.end(), args.begin(), args.end());
  launch.command.emplace_back("--runtime.store=tcp");
  const LaunchResult result = launch_workers(launch, registry);
  if (result.exit_code != 0) std::cerr << "tessera: error: " << result.failure << "\n";
  return result.exit_code;
}

}  // namespace tessera::cli
