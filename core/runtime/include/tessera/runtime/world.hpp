#pragma once
// plan_world and run_world: how this process's ranks of a job connect, as the config's
// [runtime] section says — the one place `tessera train`, `tessera bench` and embedding hosts
// turn a config into communicators.

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>

#include "tessera/config/config.hpp"
#include "tessera/plugin/communicator.hpp"
#include "tessera/plugin/store.hpp"
#include "tessera/registry/registry.hpp"
#include "tessera/transport_kit/launch_env.hpp"

namespace tessera {

// How this process takes part in the job, decided once from the config, the transport's and
// the store's descriptor capabilities and the launcher's environment, before any plugin object
// exists.
struct WorldPlan {
  // threads: the transport does not span processes (`local`), so every rank is a thread of this
  // process and they meet in an in-memory store. processes: one rank per process (`shm`,
  // `ucx`), meeting in the runtime.store plugin.
  enum class Layout : std::uint8_t { threads, processes };
  Layout layout = Layout::threads;
  int size = 1;  // ranks in the job: runtime.world_size for threads, the launcher's otherwise
  int rank = 0;  // processes: this process's rank; threads: 0, the first of its ranks
  // processes only: no launcher started this process and the job has more than one rank, so
  // somebody must start `size` workers first (`tessera train` does, through the launcher);
  // run_world refuses such a plan.
  bool needs_workers = false;
  // processes only: the store the launcher named (LaunchInfo::store_url, TESSERA_STORE_URL),
  // which run_world opens instead of runtime.store's: its plugin and the option values the URL
  // sets over the config's [store.<plugin>] section. Empty: runtime.store as configured.
  std::string store;
  std::map<std::string, std::string> store_options;
};

// Throws ConfigError when the world does not add up: an in-process transport in a process a
// launcher started as one of several (each would train alone), a runtime.world_size that some
// source set to other than the launcher's world size, a store that cannot join the processes
// of a launched job (its descriptor does not span processes, e.g. `memory`), or a runtime.store
// that names another store than the launcher's store URL (docs/launch.md, "Which store a
// worker uses": the launcher's wins over a default runtime.store and over plain `tcp`).
[[nodiscard]] WorldPlan plan_world(const Config& config, const PluginRegistry& registry,
                                   const LaunchInfo& launch);

// Called once per rank hosted by this process, on its own thread, with the rank's world
// communicator. The communicator is the body's to keep; it is aborted if another rank's
// body of this process fails, so that nobody waits for a rank that is gone.
using RankBody = std::function<void(std::shared_ptr<Communicator> world)>;

// Creates the transport once and connects the plan's ranks of this process: `size` threads that
// share one runtime.store object (by default `memory`, keys in this process), or this process as
// rank `rank` of `size` through the plan's store (the launcher's, or the runtime.store plugin;
// `tcp` finds the launcher's server through TESSERA_STORE_ADDR and TESSERA_STORE_TOKEN). Blocks
// until every body
// has returned. If one throws, the other ranks' communicators are aborted and the first failure
// (lowest rank) is rethrown after all threads have joined. Throws ConfigError for a plan that
// needs_workers, naming how to start them.
void run_world(const Config& config, const PluginRegistry& registry, const WorldPlan& plan,
               const RankBody& body);

// The plan's store: the launcher's for a launched job of processes (its plugin, with the options
// its URL sets over the config's [store.<plugin>] section), else runtime.store as configured.
// Ranks as threads share the one object it returns.
[[nodiscard]] std::shared_ptr<Store> open_job_store(const Config& config,
                                                    const PluginRegistry& registry,
                                                    const WorldPlan& plan);

}  // namespace tessera
