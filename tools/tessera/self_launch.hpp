#pragma once
// Re-runs this very CLI command as the N worker processes of one job (for transports whose
// ranks are processes), through the same launcher as `tessera launch`.

#include <string>
#include <vector>

#include "tessera/runtime/registry.hpp"

namespace tessera::cli {

// Runs `tessera <command...> <args...> --runtime.store=tcp` in `processes` workers, relaying
// rank 0's stdout only (unprefixed when `plain_stdout`, for machine-readable output). Returns
// the job's exit code, after printing which rank failed and how.
int relaunch_as_workers(const std::vector<std::string>& command, int processes,
                        const std::vector<std::string>& args, const PluginRegistry& registry,
                        bool plain_stdout, bool elastic = false);

}  // namespace tessera::cli
