// launch_info_from_environment over injected environments.
#include "tessera/transport_kit/launch_env.hpp"

#include <gtest/gtest.h>

#include "tessera/base/error.hpp"

namespace tessera {
namespace {

using Env = std::map<std::string, std::string>;

TEST(LaunchEnv, ALoneProcessIsRankZeroOfOne) {
  const auto info = launch_info_from_environment(Env{{"HOME", "/root"}});
  EXPECT_EQ(info.source, "none");
  EXPECT_EQ(info.rank, 0);
  EXPECT_EQ(info.world_size, 1);
  EXPECT_EQ(info.local_world_size, 1);
  EXPECT_EQ(info.store_address, "");
}

TEST(LaunchEnv, ReadsEverythingTesseraLaunchSets) {
  const auto info = launch_info_from_environment(Env{{"TESSERA_RANK", "5"},
                                                     {"TESSERA_WORLD_SIZE", "8"},
                                                     {"TESSERA_LOCAL_RANK", "1"},
                                                     {"TESSERA_LOCAL_WORLD_SIZE", "4"},
                                                     {"TESSERA_NODE_RANK", "1"},
                                                     {"TESSERA_STORE_ADDR", "10.0.0.1:29500"},
                                                     {"TESSERA_STORE_TOKEN", "abc"},
                                                     {"TESSERA_STORE_URL", "etcd://e:2379/t/j/"}});
  EXPECT_EQ(info.source, "tessera");
  EXPECT_EQ(info.rank, 5);
  EXPECT_EQ(info.world_size, 8);
  EXPECT_EQ(info.local_rank, 1);
  EXPECT_EQ(info.local_world_size, 4);
  EXPECT_EQ(info.node_rank, 1);
  EXPECT_EQ(info.store_address, "10.0.0.1:29500");
  EXPECT_EQ(info.store_token, "abc");
  EXPECT_EQ(info.store_url, "etcd://e:2379/t/j/");
}

TEST(LaunchEnv, TesseraLocalValuesDefaultToASingleHost) {
  const auto info =
      launch_info_from_environment(Env{{"TESSERA_RANK", "2"}, {"TESSERA_WORLD_SIZE", "3"}});
  EXPECT_EQ(info.local_rank, 2);
  EXPECT_EQ(info.local_world_size, 3);
  EXPECT_EQ(info.node_rank, 0);
}

TEST(LaunchEnv, ReadsOpenMpiAndDerivesTheNodeFromTheLocalBlock) {
  const auto info = launch_info_from_environment(Env{{"OMPI_COMM_WORLD_RANK", "6"},
                                                     {"OMPI_COMM_WORLD_SIZE", "8"},
                                                     {"OMPI_COMM_WORLD_LOCAL_RANK", "2"},
                                                     {"OMPI_COMM_WORLD_LOCAL_SIZE", "4"},
                                                     {"TESSERA_STORE_ADDR", "h:1"}});
  EXPECT_EQ(info.source, "openmpi");
  EXPECT_EQ(info.rank, 6);
  EXPECT_EQ(info.world_size, 8);
  EXPECT_EQ(info.local_rank, 2);
  EXPECT_EQ(info.local_world_size, 4);
  EXPECT_EQ(info.node_rank, 1);
  EXPECT_EQ(info.store_address, "h:1");
}

TEST(LaunchEnv, ReadsSlurmAndExpandsItsCompressedTasksPerNode) {
  const auto info = launch_info_from_environment(Env{{"SLURM_PROCID", "6"},
                                                     {"SLURM_NTASKS", "7"},
                                                     {"SLURM_LOCALID", "0"},
                                                     {"SLURM_NODEID", "3"},
                                                     {"SLURM_TASKS_PER_NODE", "2(x3),1"}});
  EXPECT_EQ(info.source, "slurm");
  EXPECT_EQ(info.rank, 6);
  EXPECT_EQ(info.world_size, 7);
  EXPECT_EQ(info.node_rank, 3);
  EXPECT_EQ(info.local_world_size, 1);
}

TEST(LaunchEnv, TesseraVariablesWinOverMpiAndSlurm) {
  const auto info = launch_info_from_environment(Env{{"TESSERA_RANK", "0"},
                                                     {"TESSERA_WORLD_SIZE", "2"},
                                                     {"OMPI_COMM_WORLD_RANK", "1"},
                                                     {"OMPI_COMM_WORLD_SIZE", "2"},
                                                     {"SLURM_PROCID", "1"}});
  EXPECT_EQ(info.source, "tessera");
  EXPECT_EQ(info.rank, 0);
}

void expect_config_error_mentioning(const Env& env, const std::string& needle) {
  try {
    (void)launch_info_from_environment(env);
    ADD_FAILURE() << "no error; expected one mentioning " << needle;
  } catch (const ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what();
  }
}

TEST(LaunchEnv, ARankNotBelowTheWorldSizeIsAConfigError) {
  expect_config_error_mentioning({{"TESSERA_RANK", "4"}, {"TESSERA_WORLD_SIZE", "4"}},
                                 "rank 4 is not below world size 4");
}

TEST(LaunchEnv, ANonNumericValueIsAConfigErrorNamingTheVariable) {
  expect_config_error_mentioning({{"TESSERA_RANK", "one"}, {"TESSERA_WORLD_SIZE", "4"}},
                                 "TESSERA_RANK='one'");
  expect_config_error_mentioning({{"OMPI_COMM_WORLD_RANK", "1"}, {"OMPI_COMM_WORLD_SIZE", "4x"}},
                                 "OMPI_COMM_WORLD_SIZE");
  expect_config_error_mentioning({{"TESSERA_RANK", "-1"}, {"TESSERA_WORLD_SIZE", "4"}},
                                 "TESSERA_RANK");
}

TEST(LaunchEnv, ARankWithoutAWorldSizeIsAConfigError) {
  expect_config_error_mentioning({{"TESSERA_RANK", "0"}}, "TESSERA_WORLD_SIZE is not set");
  expect_config_error_mentioning({{"SLURM_PROCID", "0"}}, "SLURM_NPROCS");
}

TEST(LaunchEnv, InconsistentLocalValuesAreAConfigError) {
  expect_config_error_mentioning({{"TESSERA_RANK", "0"},
                                  {"TESSERA_WORLD_SIZE", "4"},
                                  {"TESSERA_LOCAL_RANK", "2"},
                                  {"TESSERA_LOCAL_WORLD_SIZE", "2"}},
                                 "local rank 2 is not below local world size 2");
  expect_config_error_mentioning(
      {{"TESSERA_RANK", "0"}, {"TESSERA_WORLD_SIZE", "2"}, {"TESSERA_LOCAL_WORLD_SIZE", "3"}},
      "local world size 3");
  expect_config_error_mentioning({{"SLURM_PROCID", "0"},
                                  {"SLURM_NTASKS", "2"},
                                  {"SLURM_NODEID", "2"},
                                  {"SLURM_TASKS_PER_NODE", "1(x2)"}},
                                 "lists no tasks");
}

TEST(LaunchEnv, TheProcessEnvironmentIsReadWhenNoneIsInjected) {
  ::setenv("TESSERA_TEST_MARKER", "present", 1);
  EXPECT_EQ(process_environment().at("TESSERA_TEST_MARKER"), "present");
  ::unsetenv("TESSERA_TEST_MARKER");
}

}  // namespace
}  // namespace tessera
