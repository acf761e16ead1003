#include "tessera/runtime/world.hpp"

#include <algorithm>
#include <cstdio>
#include <exception>
#include <mutex>
#include <thread>
#include <vector>

#include "launcher_store.hpp"
#include "tessera/base/error.hpp"
#include "tessera/plugin/transport.hpp"

namespace tessera {

namespace {

// The plugin a core option selects, as the registry knows it from its descriptor.
const PluginInfo& selected(const Config& config, const PluginRegistry& registry, PluginKind kind,
                           const std::string& key) {
  return registry.find(kind, config.section("runtime").get_string(key));
}

// Ranks as threads: one Transport object, one store object (runtime.store, by default the
// in-process `memory`), one thread per rank.
void run_threads(std::shared_ptr<Transport> transport, const std::shared_ptr<Store>& store,
                 int size, Duration timeout, const RankBody& body) {
  std::mutex mutex;
  std::vector<std::shared_ptr<Communicator>> worlds(static_cast<std::size_t>(size));
  std::vector<std::exception_ptr> errors(static_cast<std::size_t>(size));
  bool failed = false;

  auto abort_all = [&](int failed_rank) {
    // Called with mutex held.
    failed = true;
    for (auto& world : worlds) {
      if (world) world->abort("rank " + std::to_string(failed_rank) + " of this process failed");
    }
  };

  std::vector<std::thread> threads;
  threads.reserve(static_cast<std::size_t>(size));
  for (int rank = 0; rank < size; ++rank) {
    threads.emplace_back([&, rank] {
      const auto r = static_cast<std::size_t>(rank);
      try {
        auto world = transport->connect(store, rank, size, timeout);
        {
          std::lock_guard lock(mutex);
          worlds[r] = world;
          if (failed) world->abort("another rank of this process failed");
        }
        body(std::move(world));
      } catch (...) {
        std::lock_guard lock(mutex);
        errors[r] = std::current_exception();
        abort_all(rank);
      }
    });
  }
  for (auto& t : threads) t.join();
  // Report the root cause: the first rank that failed on its own account is usually the
  // lowest one; the others mostly report the abort it caused.
  for (auto& error : errors) {
    if (error) std::rethrow_exception(error);
  }
}

// A world must add up: the ranks the config asks for are the ranks that meet. Each way it
// would not runs independent copies of the job that all "succeed", or hangs at the rendezvous.
void check_world_adds_up(const Config& config, const PluginRegistry& registry,
                         const LaunchInfo& launch, bool processes) {
  const auto& runtime = config.section("runtime");
  const auto origin = [&](const std::string& key) { return config.origin("runtime", key).text; };
  const auto lead = [&](const std::string& key) {
    return origin(key) == "default" ? std::string() : origin(key) + ": ";
  };
  const std::string launched =
      launch.source == "none"
          ? std::string("no launcher started this process (it is a world of 1)")
          : "this process is rank " + std::to_string(launch.rank) + " of " +
                std::to_string(launch.world_size) + " started by " +
                (launch.source == "tessera" ? std::string("tessera launch") : launch.source);
  if (!processes && launch.source != "none" && launch.world_size > 1) {
    throw ConfigError(
        lead("transport") + "[runtime] transport = " + runtime.get_string("transport") + " (" +
        origin("transport") + ") runs every rank as a thread of one process, but " + launched +
        ", so each process would train alone; use a multi-process transport "
        "(shm, ucx) or start one process");
  }
  if (!processes || launch.source == "none") return;
  const auto size = runtime.get_int("world_size");
  if (origin("world_size") != "default" && size != launch.world_size) {
    throw ConfigError(origin("world_size") + ": [runtime] world_size = " + std::to_string(size) +
                      " but " + launched + "; start " + std::to_string(size) +
                      " processes (tessera launch -n " + std::to_string(size) +
                      ") or remove world_size");
  }
  // A launcher's store URL names a store that spans processes; launcher_store() checks it
  // against runtime.store.
  if (!launch.store_url.empty()) return;
  const auto& store = selected(config, registry, PluginKind::store, "store");
  if (launch.world_size > 1 && !store.capabilities.spans_processes) {
    throw ConfigError(lead("store") + "[runtime] store = " + runtime.get_string("store") + " (" +
                      origin("store") + ") keeps its keys inside one process and cannot join " +
                      std::to_string(launch.world_size) +
                      " processes; use a store that spans processes (tcp, the launcher's, or "
                      "file)");
  }
}

}  // namespace

WorldPlan plan_world(const Config& config, const PluginRegistry& registry,
                     const LaunchInfo& launch) {
  const auto& transport = selected(config, registry, PluginKind::transport, "transport");
  const bool processes = transport.capabilities.spans_processes;
  check_world_adds_up(config, registry, launch, processes);
  WorldPlan plan;
  const auto world_size = static_cast<int>(config.section("runtime").get_int("world_size"));
  if (!processes) {
    plan.layout = WorldPlan::Layout::threads;
    plan.size = world_size;
  } else if (launch.source != "none") {
    plan.layout = WorldPlan::Layout::processes;
    plan.size = launch.world_size;
    plan.rank = launch.rank;
    if (auto store = detail::launcher_store(config, registry, launch)) {
      plan.store = std::move(store->plugin);
      plan.store_options = std::move(store->options);
    }
  } else {
    plan.layout = WorldPlan::Layout::processes;
    plan.size = world_size;
    plan.needs_workers = world_size > 1;
  }
  return plan;
}

std::shared_ptr<Store> open_job_store(const Config& config, const PluginRegistry& registry,
                                      const WorldPlan& plan) {
  if (plan.store.empty()) return config.create<Store>(registry, "runtime", "store");
  const auto& configured = config.plugin(PluginKind::store, plan.store);
  auto values = configured.values();
  for (const auto& [key, value] : plan.store_options) values[key] = value;
  return registry.create<Store>(plan.store,
                                Options(configured.section(), configured.specs(), values));
}

void run_world(const Config& config, const PluginRegistry& registry, const WorldPlan& plan,
               const RankBody& body) {
  const auto& runtime = config.section("runtime");
  if (plan.needs_workers) {
    const std::string size = std::to_string(plan.size);
    throw ConfigError(config.origin("runtime", "world_size").text + ": [runtime] world_size = " +
                      size + " with transport " + runtime.get_string("transport") +
                      " needs one process per rank, but no launcher started this process; " +
                      "start them with tessera launch -n " + size + ", or remove world_size");
  }
  if (plan.size < 1) {
    throw ConfigError("runtime.world_size must be at least 1 (" +
                      config.origin("runtime", "world_size").text + ")");
  }
  const Duration timeout = runtime.get_duration("timeout");
  auto transport = config.create<Transport>(registry, "runtime", "transport");
  if (plan.layout == WorldPlan::Layout::threads) {
    run_threads(std::move(transport), open_job_store(config, registry, plan), plan.size, timeout,
                body);
    return;
  }
  auto store = open_job_store(config, registry, plan);
  body(transport->connect(std::move(store), plan.rank, plan.size, timeout));
}

}  // namespace tessera
