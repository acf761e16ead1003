#include <exception>
#include <mutex>
#include <thread>
#include <vector>

#include "tessera/base/error.hpp"
#include "tessera/plugin/transport.hpp"
#include "tessera/runtime/world.hpp"

namespace tessera {

namespace {

bool is_multi_process(const Config& config, const PluginRegistry& registry,
                      std::shared_ptr<Transport>& transport) {
  transport = config.create<Transport>(registry, "runtime", "transport");
  return transport->capabilities().multi_process;
}

// Ranks as threads: one Transport object, one in-memory store, one thread per rank.
void run_threads(std::shared_ptr<Transport> transport, int size, Duration timeout,
                 const RankBody& body) {
  auto store = make_memory_store();
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

// A world must add up: the ranks the config asks for are the ranks that meet. Two ways it
// would not, each running independent copies of the job that all "succeed".
void check_world_adds_up(const Config& config, const LaunchInfo& launch, bool multi_process) {
  const auto& runtime = config.section("runtime");
  const auto origin = [&](const std::string& key) { return config.origin("runtime", key).text; };
  const std::string launched =
      launch.source == "none"
          ? std::string("no launcher started this process (it is a world of 1)")
          : "this process is rank " + std::to_string(launch.rank) + " of " +
                std::to_string(launch.world_size) + " started by " +
                (launch.source == "tessera" ? std::string("tessera launch") : launch.source);
  if (!multi_process && launch.source != "none" && launch.world_size > 1) {
    const std::string where = origin("transport") == "default" ? "" : origin("transport") + ": ";
    throw ConfigError(where + "[runtime] transport = " + runtime.get_string("transport") + " (" +
                      origin("transport") + ") runs every rank as a thread of one process, but " +
                      launched +
                      ", so each process would train alone; use a multi-process transport "
                      "(shm, ucx) or start one process");
  }
  const auto size = runtime.get_int("world_size");
  if (multi_process && origin("world_size") != "default" && size != launch.world_size) {
    throw ConfigError(origin("world_size") + ": [runtime] world_size = " + std::to_string(size) +
                      " but " + launched + "; start " + std::to_string(size) +
                      " processes (tessera launch -n " + std::to_string(size) +
                      ") or remove world_size");
  }
}

}  // namespace

int world_size_of(const Config& config, const PluginRegistry& registry, const LaunchInfo& launch) {
  std::shared_ptr<Transport> transport;
  if (is_multi_process(config, registry, transport)) return launch.world_size;
  return static_cast<int>(config.section("runtime").get_int("world_size"));
}

void run_world(const Config& config, const PluginRegistry& registry, const LaunchInfo& launch,
               const RankBody& body) {
  const auto& runtime = config.section("runtime");
  const Duration timeout = runtime.get_duration("timeout");
  std::shared_ptr<Transport> transport;
  const bool multi_process = is_multi_process(config, registry, transport);
  check_world_adds_up(config, launch, multi_process);
  if (!multi_process) {
    const auto size = runtime.get_int("world_size");
    if (size < 1) {
      throw ConfigError("runtime.world_size must be at least 1 (" +
                        config.origin("runtime", "world_size").text + ")");
    }
    run_threads(std::move(transport), static_cast<int>(size), timeout, body);
    return;
  }

  std::shared_ptr<Store> store;
  const auto& store_name = runtime.get_string("store");
  if (store_name == "memory") {
    if (launch.world_size > 1) {
      throw ConfigError("runtime.store = memory cannot join " + std::to_string(launch.world_size) +
                        " processes (" + config.origin("runtime", "store").text +
                        "); use tcp (the launcher's store) or file");
    }
    store = make_memory_store();
  } else {
    store = config.create<Store>(registry, "runtime", "store");
  }
  body(transport->connect(std::move(store), launch.rank, launch.world_size, timeout));
}

}  // namespace tessera
