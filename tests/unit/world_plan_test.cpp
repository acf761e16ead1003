// plan_world decides how a job's ranks meet from the descriptors' capabilities alone, and
// run_world connects them without special-casing any store.
#include <gtest/gtest.h>

#include <atomic>
#include <string>
#include <vector>

#include "tessera/base/error.hpp"
#include "tessera/runtime/world.hpp"

namespace tessera {
namespace {

::testing::AssertionResult contains(const std::string& text, const std::string& part) {
  if (text.find(part) != std::string::npos) return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure() << "'" << text << "' does not contain '" << part << "'";
}

LaunchInfo launched(int rank, int world_size) {
  LaunchInfo launch;
  launch.rank = rank;
  launch.world_size = world_size;
  launch.local_world_size = world_size;
  launch.local_rank = rank;
  launch.source = "tessera";
  return launch;
}

LaunchInfo alone() {
  LaunchInfo launch;
  launch.source = "none";
  return launch;
}

class PlanWorld : public ::testing::Test {
 protected:
  void SetUp() override {
    registry_.scan_directory(TESSERA_PLUGIN_DIR);
    registry_.scan_directory(TESSERA_WORLD_TEST_PLUGIN_DIR);
  }

  [[nodiscard]] Config config(std::vector<std::string> flags) const {
    ConfigSources sources;
    sources.use_environment = false;
    sources.flags = std::move(flags);
    return Config::load(sources, registry_);
  }

  std::string plan_error(const std::vector<std::string>& flags, const LaunchInfo& launch) const {
    try {
      (void)plan_world(config(flags), registry_, launch);
    } catch (const ConfigError& e) {
      return e.what();
    }
    ADD_FAILURE() << "the world was planned";
    return {};
  }

  PluginRegistry registry_;
};

TEST_F(PlanWorld, AnInProcessTransportRunsTheRanksAsThreads) {
  const auto plan = plan_world(config({"--runtime.transport=local", "--runtime.world_size=3"}),
                               registry_, alone());
  EXPECT_EQ(plan.layout, WorldPlan::Layout::threads);
  EXPECT_EQ(plan.size, 3);
  EXPECT_FALSE(plan.needs_workers);
}

TEST_F(PlanWorld, TheTransportIsNeverCreatedToPlanTheWorld) {
  // world_test_processes throws from its constructor: the plan reads its descriptor only.
  const auto alone_plan =
      plan_world(config({"--runtime.transport=world_test_processes", "--runtime.world_size=4"}),
                 registry_, alone());
  EXPECT_EQ(alone_plan.layout, WorldPlan::Layout::processes);
  EXPECT_EQ(alone_plan.size, 4);
  EXPECT_TRUE(alone_plan.needs_workers);
  const auto worker_plan =
      plan_world(config({"--runtime.transport=world_test_processes", "--runtime.store=tcp"}),
                 registry_, launched(2, 4));
  EXPECT_EQ(worker_plan.layout, WorldPlan::Layout::processes);
  EXPECT_EQ(worker_plan.rank, 2);
  EXPECT_EQ(worker_plan.size, 4);
  EXPECT_FALSE(worker_plan.needs_workers);
}

TEST_F(PlanWorld, AStoreThatKeepsItsKeysInOneProcessCannotJoinLaunchedProcesses) {
  EXPECT_TRUE(contains(
      plan_error({"--runtime.transport=shm", "--runtime.store=memory"}, launched(0, 2)),
      "flag --runtime.store: [runtime] store = memory (flag --runtime.store) keeps its keys "
      "inside one process and cannot join 2 processes; use a store that spans processes"));
  // One process may use it: nothing needs joining.
  EXPECT_NO_THROW((void)plan_world(config({"--runtime.transport=shm", "--runtime.store=memory"}),
                                   registry_, launched(0, 1)));
}

LaunchInfo launched_with_store(const std::string& url) {
  auto launch = launched(1, 2);
  launch.store_url = url;
  launch.store_token = "job-token";
  return launch;
}

constexpr const char* kEtcdJob = "etcd://127.0.0.1:2379/tessera/j1/";

TEST_F(PlanWorld, ALaunchersStoreWinsOverTheDefaultStore) {
  const auto plan =
      plan_world(config({"--runtime.transport=shm"}), registry_, launched_with_store(kEtcdJob));
  EXPECT_EQ(plan.store, "etcd");
  EXPECT_EQ(plan.store_options, (std::map<std::string, std::string>{{"endpoints", "127.0.0.1:2379"},
                                                                    {"prefix", "tessera/j1/"}}));
}

TEST_F(PlanWorld, ALaunchersStoreWinsOverTcpWithNoServerOfItsOwn) {
  const auto plan = plan_world(config({"--runtime.transport=shm", "--runtime.store=tcp"}),
                               registry_, launched_with_store("file:///shared/j1"));
  EXPECT_EQ(plan.store, "file");
  EXPECT_EQ(plan.store_options, (std::map<std::string, std::string>{{"path", "/shared/j1"}}));
}

TEST_F(PlanWorld, ALaunchersTcpStoreCarriesTheJobToken) {
  const auto plan = plan_world(config({"--runtime.transport=shm"}), registry_,
                               launched_with_store("tcp://127.0.0.1:29500"));
  EXPECT_EQ(plan.store, "tcp");
  EXPECT_EQ(plan.store_options,
            (std::map<std::string, std::string>{
                {"host", "127.0.0.1"}, {"port", "29500"}, {"token", "job-token"}}));
}

TEST_F(PlanWorld, AConfigNamingTheLaunchersPluginKeepsItsOtherOptions) {
  const auto plan = plan_world(
      config({"--runtime.transport=shm", "--runtime.store=etcd", "--store.etcd.timeout=5s"}),
      registry_, launched_with_store(kEtcdJob));
  EXPECT_EQ(plan.store, "etcd");
  EXPECT_FALSE(plan.store_options.contains("timeout"));
}

TEST_F(PlanWorld, AConfigNamingAnotherStoreThanTheLaunchersIsRefusedNamingBoth) {
  EXPECT_TRUE(contains(
      plan_error({"--runtime.transport=shm", "--runtime.store=file", "--store.file.path=/x"},
                 launched_with_store(kEtcdJob)),
      "flag --runtime.store: [runtime] store = file (flag --runtime.store) but the launcher "
      "gives this worker the etcd store etcd://127.0.0.1:2379/tessera/j1/ (TESSERA_STORE_URL, "
      "from tessera launch --store); remove runtime.store"));
  EXPECT_TRUE(contains(plan_error({"--runtime.transport=shm", "--runtime.store=memory"},
                                  launched_with_store(kEtcdJob)),
                       "[runtime] store = memory (flag --runtime.store) but the launcher"));
  // tcp with a server of its own is another store.
  EXPECT_TRUE(contains(plan_error({"--runtime.transport=shm", "--runtime.store=tcp",
                                   "--store.tcp.host=10.1.1.1", "--store.tcp.port=29500"},
                                  launched_with_store(kEtcdJob)),
                       "[runtime] store = tcp (flag --runtime.store) but the launcher gives"));
}

TEST_F(PlanWorld, AConfigPointingTheLaunchersPluginElsewhereIsRefusedNamingBoth) {
  EXPECT_TRUE(contains(
      plan_error({"--runtime.transport=shm", "--runtime.store=etcd", "--store.etcd.prefix=mine/"},
                 launched_with_store(kEtcdJob)),
      "flag --store.etcd.prefix: [store.etcd] prefix = mine/ (flag --store.etcd.prefix) but the "
      "launcher gives this worker the etcd store etcd://127.0.0.1:2379/tessera/j1/ "
      "(TESSERA_STORE_URL, from tessera launch --store), where prefix = tessera/j1/"));
  // The same value is no conflict.
  EXPECT_NO_THROW((void)plan_world(config({"--runtime.transport=shm", "--runtime.store=etcd",
                                           "--store.etcd.prefix=tessera/j1/"}),
                                   registry_, launched_with_store(kEtcdJob)));
}

TEST_F(PlanWorld, AMalformedLauncherStoreUrlNamesTheVariable) {
  EXPECT_TRUE(contains(plan_error({"--runtime.transport=shm"}, launched_with_store("etcd://h:x")),
                       "environment TESSERA_STORE_URL etcd://h:x: 'h:x' has no port"));
}

TEST_F(PlanWorld, ThreadsInEachOfSeveralLaunchedProcessesWouldTrainAlone) {
  EXPECT_TRUE(contains(plan_error({"--runtime.transport=local"}, launched(1, 2)),
                       "runs every rank as a thread of one process, but this process is rank 1 "
                       "of 2 started by tessera launch, so each process would train alone"));
}

TEST_F(PlanWorld, AWorldSizeOtherThanTheLaunchersIsRefused) {
  EXPECT_TRUE(contains(
      plan_error({"--runtime.transport=shm", "--runtime.store=tcp", "--runtime.world_size=3"},
                 launched(0, 2)),
      "flag --runtime.world_size: [runtime] world_size = 3 but this process is rank 0 of 2"));
}

TEST_F(PlanWorld, RunWorldRefusesAPlanThatNeedsWorkers) {
  const Config c = config({"--runtime.transport=shm", "--runtime.world_size=2"});
  const auto plan = plan_world(c, registry_, alone());
  ASSERT_TRUE(plan.needs_workers);
  try {
    run_world(c, registry_, plan, [](std::shared_ptr<Communicator>) {});
    FAIL() << "run_world ran a world nobody started";
  } catch (const ConfigError& e) {
    EXPECT_TRUE(contains(e.what(),
                         "flag --runtime.world_size: [runtime] world_size = 2 with "
                         "transport shm needs one process per rank, but no launcher "
                         "started this process; start them with tessera launch -n 2"));
  }
}

TEST_F(PlanWorld, OneProcessWithTheMemoryStorePluginConnectsLikeAnyStore) {
  // The in-process store is a regular choice: run_world creates it through the registry.
  const Config c = config({"--runtime.transport=shm", "--runtime.store=memory"});
  const auto plan = plan_world(c, registry_, alone());
  std::atomic<int> ranks{0};
  run_world(c, registry_, plan, [&](std::shared_ptr<Communicator> world) {
    EXPECT_EQ(world->size(), 1);
    ranks += 1;
  });
  EXPECT_EQ(ranks, 1);
}

TEST_F(PlanWorld, ThreadsMeetInTheirOwnStore) {
  const Config c = config({"--runtime.transport=local", "--runtime.world_size=3"});
  std::atomic<int> rank_sum{0};
  run_world(c, registry_, plan_world(c, registry_, alone()),
            [&](std::shared_ptr<Communicator> world) {
              EXPECT_EQ(world->size(), 3);
              rank_sum += world->rank();
            });
  EXPECT_EQ(rank_sum, 0 + 1 + 2);
}

}  // namespace
}  // namespace tessera
