#pragma once
// run_world: connects this process's ranks of a job as the config's [runtime] section says
// and runs one body per rank — the one place `tessera train`, `tessera bench` and embedding
// hosts turn a config into communicators.

#include <functional>
#include <memory>

#include "tessera/plugin/communicator.hpp"
#include "tessera/runtime/config.hpp"
#include "tessera/runtime/launch_env.hpp"
#include "tessera/runtime/registry.hpp"

namespace tessera {

// Called once per rank hosted by this process, on its own thread, with the rank's world
// communicator. The communicator is the body's to keep; it is aborted if another rank's
// body of this process fails, so that nobody waits for a rank that is gone.
using RankBody = std::function<void(std::shared_ptr<Communicator> world)>;

// Two layouts, chosen by the transport's capabilities:
//  - in-process (the transport is not multi_process, e.g. `local`): runtime.world_size ranks
//    as threads of this process, meeting in an in-memory store;
//  - one rank per process (e.g. `shm`): this process is rank `launch.rank` of
//    `launch.world_size`, meeting in the runtime.store plugin (`tcp` finds the launcher's
//    server through TESSERA_STORE_ADDR/TESSERA_STORE_TOKEN).
// Blocks until every body has returned. If one throws, the other ranks' communicators are
// aborted and the first failure (lowest rank) is rethrown after all threads have joined.
// Throws ConfigError when the layout is impossible (a multi-process transport with the
// in-process `memory` store and more than one rank, a world size below 1) or does not add up:
// an in-process transport in a process a launcher started as one of several, or a
// runtime.world_size that some source set to other than the launcher's world size.
void run_world(const Config& config, const PluginRegistry& registry, const LaunchInfo& launch,
               const RankBody& body);

// The number of ranks the job has: runtime.world_size for in-process transports, the
// launcher's world size otherwise.
[[nodiscard]] int world_size_of(const Config& config, const PluginRegistry& registry,
                                const LaunchInfo& launch);

}  // namespace tessera
