#pragma once
// Re-runs this very CLI command as the N worker processes of one job (for transports whose
// ranks are processes), through the same launcher as `tessera launch`.

#include <optional>
#include <string>
#include <vector>

#include "tessera/registry/registry.hpp"

namespace tessera::cli {

// How the workers of an elastic run are launched: `tessera train` with [elastic] enabled = true.
struct ElasticLaunch {
  int max_restarts = 0;  // [elastic] max_restarts
};

// Runs `tessera <command...> <args...> --runtime.store=tcp` in `processes` workers, relaying
// rank 0's stdout only (unprefixed when `plain_stdout`, for machine-readable output; every
// worker's for an elastic run, whose rank 0 may die). Returns the job's exit code, after
// printing which rank failed and how.
int relaunch_as_workers(const std::vector<std::string>& command, int processes,
                        const std::vector<std::string>& args, const PluginRegistry& registry,
                        bool plain_stdout, std::optional<ElasticLaunch> elastic = std::nullopt);

}  // namespace tessera::cli
