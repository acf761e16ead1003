#include <algorithm>
#include <cstdio>
#include <exception>
#include <thread>
#include <vector>

#include "tessera/base/error.hpp"
#include "tessera/elastic/elastic_run.hpp"

namespace tessera {

void run_elastic_world(const Config& config, const PluginRegistry& registry, const WorldPlan& plan,
                       const LaunchInfo& launch, const ElasticRankBody& body) {
  if (plan.needs_workers) {
    throw ConfigError("[elastic] enabled = true with transport " +
                      config.section("runtime").get_string("transport") +
                      " needs one process per rank, but no launcher started this process; start "
                      "them with tessera launch -n N, or tessera train -n N");
  }
  const Duration timeout = config.section("runtime").get_duration("timeout");
  // Every worker refuses a world that cannot hold, whoever launched it.
  check_elastic_world_size(config, plan.size);
  auto options = ElasticOptions::from(config.section("elastic"));
  // ElasticOptions::from checked min_workers <= max_workers when max_workers is set.
  if (options.max_workers == 0) options.max_workers = std::max(plan.size, options.min_workers);
  auto transport = config.create<Transport>(registry, "runtime", "transport");
  const auto train_elastic_rank = [&](const std::shared_ptr<Store>& store, const std::string& id) {
    body(make_elastic_world(transport, store, options, id, timeout));
  };
  if (plan.layout == WorldPlan::Layout::processes) {
    auto store = open_job_store(config, registry, plan);
    train_elastic_rank(
        store, launch.worker_id.empty() ? "rank" + std::to_string(plan.rank) : launch.worker_id);
    return;
  }
  // Every rank thread meets in one store object: runtime.store, by default the in-process one.
  auto store = open_job_store(config, registry, plan);
  std::vector<std::exception_ptr> errors(static_cast<std::size_t>(plan.size));
  std::vector<std::thread> threads;
  for (int rank = 0; rank < plan.size; ++rank) {
    threads.emplace_back([&, rank] {
      try {
        train_elastic_rank(store, "thread" + std::to_string(rank));
      } catch (...) {
        errors[static_cast<std::size_t>(rank)] = std::current_exception();
      }
    });
  }
  for (auto& t : threads) t.join();
  for (std::size_t rank = 0; rank < errors.size(); ++rank) {
    if (!errors[rank]) continue;
    try {
      std::rethrow_exception(errors[rank]);
    } catch (const std::exception& e) {
      std::fprintf(stderr, "elastic: rank thread %zu left the run: %s\n", rank, e.what());
    }
  }
  if (std::all_of(errors.begin(), errors.end(), [](const auto& e) { return e != nullptr; })) {
    std::rethrow_exception(errors.front());
  }
}

}  // namespace tessera
