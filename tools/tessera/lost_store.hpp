#pragma once
// An elastic worker whose job's store is gone: the membership lives there, so the run can
// neither go on nor finish. What it ends with names the store and what --resume goes on from.

#include <filesystem>
#include <string>

#include "tessera/registry/registry.hpp"
#include "tessera/transport_kit/launch_env.hpp"

namespace tessera::cli {

// Whether the store the launcher gave this worker (TESSERA_STORE_URL) answers a read within a
// few seconds, through a client of its own. True when the launcher named none. Never throws.
[[nodiscard]] bool launcher_store_answers(const PluginRegistry& registry, const LaunchInfo& launch);

// "elastic: lost the job's store URL (CAUSE); ...": what stopped, and the newest checkpoint in
// `checkpoint_dir` to go on from with --resume (or why there is none).
[[nodiscard]] std::string lost_store_message(const std::string& store_url, const std::string& cause,
                                             const std::filesystem::path& checkpoint_dir);

}  // namespace tessera::cli
