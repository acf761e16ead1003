// Where the registry looks for plugins, and how it suggests names.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdlib>
#include <filesystem>

#include "config_test_support.hpp"
#include "tessera/base/error.hpp"
#include "tessera/registry/registry.hpp"

namespace tessera {
namespace {

// Explicit wins: a folder the user named comes before the plugins installed with libtessera.
TEST(RegistrySearchPath, PluginPathInOrderThenTheFolderBesideLibtessera) {
  const config_test::ScratchDir scratch;
  const auto a = scratch.path() / "a";
  const auto b = scratch.path() / "b";
  std::filesystem::create_directories(a);
  std::filesystem::create_directories(b);
  ASSERT_EQ(::setenv("TESSERA_PLUGIN_PATH", (a.string() + "::" + b.string()).c_str(), 1), 0);
  const auto dirs = PluginRegistry::default_search_path();
  ::unsetenv("TESSERA_PLUGIN_PATH");
  ASSERT_EQ(dirs.size(), 3U);
  EXPECT_EQ(dirs[0], a);
  EXPECT_EQ(dirs[1], b);
  EXPECT_EQ(dirs[2].filename(), "plugins");
  EXPECT_EQ(dirs[2].parent_path().filename(), "tessera");
  EXPECT_TRUE(std::filesystem::exists(dirs[2].parent_path().parent_path() / "libtessera.so"));
}

TEST(RegistrySearchPath, PluginPathFolderThatDoesNotExistIsAnErrorNamingTheVariable) {
  const config_test::ScratchDir scratch;
  const auto missing = scratch.path() / "no_such_folder";
  ASSERT_EQ(::setenv("TESSERA_PLUGIN_PATH",
                     (scratch.path().string() + ":" + missing.string()).c_str(), 1),
            0);
  std::string message;
  try {
    (void)PluginRegistry::default_search_path();
  } catch (const ConfigError& e) {
    message = e.what();
  }
  ::unsetenv("TESSERA_PLUGIN_PATH");
  EXPECT_TRUE(config_test::contains(message, "environment TESSERA_PLUGIN_PATH: plugin folder '" +
                                                 missing.string() + "' does not exist"));
}

// A copy of the config tests' optimizer plugin (cfg_sgd) in a folder of its own.
std::filesystem::path copy_of_cfg_sgd(const std::filesystem::path& dir) {
  std::filesystem::create_directories(dir);
  const auto file = dir / "libconfig_test_optimizer.so";
  std::filesystem::copy_file(config_test::kPluginDir / "libconfig_test_optimizer.so", file);
  return file;
}

TEST(RegistrySearchPath, NamedFolderWinsOverACopyOnTheDefaultSearchPath) {
  const config_test::ScratchDir scratch;
  const auto named = copy_of_cfg_sgd(scratch.path() / "named");
  PluginRegistry registry;
  registry.scan_directory(config_test::kPluginDir);  // as the default search path would
  registry.scan_named({named.parent_path()}, "my.ini:3 (plugins.path)");
  EXPECT_EQ(registry.find(PluginKind::optimizer, "cfg_sgd").file, named);
  ASSERT_EQ(registry.plugins(PluginKind::optimizer).size(), 1U);
  const auto shadowed = std::find_if(registry.failures().begin(), registry.failures().end(),
                                     [](const PluginLoadFailure& f) { return f.shadowed; });
  ASSERT_NE(shadowed, registry.failures().end());
  EXPECT_EQ(shadowed->file, config_test::kPluginDir / "libconfig_test_optimizer.so");
  EXPECT_TRUE(config_test::contains(shadowed->reason, "replaced by " + named.string()));
  EXPECT_TRUE(config_test::contains(shadowed->reason, "my.ini:3 (plugins.path)"));
}

TEST(RegistrySearchPath, FirstOfTwoNamedFoldersWins) {
  const config_test::ScratchDir scratch;
  const auto first = copy_of_cfg_sgd(scratch.path() / "first");
  const auto second = copy_of_cfg_sgd(scratch.path() / "second");
  PluginRegistry registry;
  registry.scan_named({first.parent_path(), second.parent_path()}, "flag --plugins.path");
  EXPECT_EQ(registry.find(PluginKind::optimizer, "cfg_sgd").file, first);
  ASSERT_EQ(registry.failures().size(), 1U);
  EXPECT_EQ(registry.failures()[0].file, second);
  EXPECT_TRUE(registry.failures()[0].shadowed);
}

TEST(RegistrySearchPath, NamedFolderThatDoesNotExistIsAnErrorNamingWhereItWasNamed) {
  const config_test::ScratchDir scratch;
  const auto missing = scratch.path() / "no_such_folder";
  PluginRegistry registry;
  try {
    registry.scan_named({scratch.path(), missing}, "my.ini:3 (plugins.path)");
    ADD_FAILURE() << "a missing folder was accepted";
  } catch (const ConfigError& e) {
    EXPECT_TRUE(config_test::contains(e.what(), "my.ini:3 (plugins.path): plugin folder '" +
                                                    missing.string() + "' does not exist"));
  }
  EXPECT_TRUE(registry.scanned_directories().empty()) << "folders were scanned before the check";
}

// The origin comes from where the configuration set plugins.path: file:line, variable or flag.
TEST(RegistrySearchPath, ConfigPluginsPathThatDoesNotExistNamesItsSource) {
  const config_test::ScratchDir scratch;
  const auto ini = scratch.write("job.ini", "# plugins of this job\n[plugins]\npath = missing\n");
  EXPECT_TRUE(config_test::contains(config_test::load_error(config_test::sources(ini)),
                                    ini.string() + ":3 (plugins.path): plugin folder '" +
                                        (scratch.path() / "missing").string() +
                                        "' does not exist"));
  EXPECT_TRUE(config_test::contains(
      config_test::load_error(config_test::sources({}, {{"TESSERA_PLUGINS_PATH", "/no/such"}})),
      "environment TESSERA_PLUGINS_PATH: plugin folder '/no/such' does not exist"));
  EXPECT_TRUE(config_test::contains(
      config_test::load_error(config_test::sources({}, {}, {"--plugins.path=/no/such"})),
      "flag --plugins.path: plugin folder '/no/such' does not exist"));
}

TEST(RegistrySearchPath, ScannedFoldersAreRemembered) {
  PluginRegistry registry;
  registry.scan({"/nonexistent/one", "/nonexistent/two"});
  EXPECT_EQ(registry.scanned_directories(),
            (std::vector<std::filesystem::path>{"/nonexistent/one", "/nonexistent/two"}));
}

TEST(RegistryNearestName, SuggestsTyposWithinAThirdOfTheLength) {
  const std::vector<std::string> names{"local", "shm", "nccl", "ucx"};
  EXPECT_EQ(nearest_name("lcoal", names), "local");
  EXPECT_EQ(nearest_name("shmm", names), "shm");
  EXPECT_EQ(nearest_name("tcp", names), "ucx");  // two edits: still within the minimum of 2
  EXPECT_EQ(nearest_name("infiniband", names), std::nullopt);
  EXPECT_EQ(nearest_name("gradient_bucket_sizes", {"gradient_bucket_size"}),
            "gradient_bucket_size");
  EXPECT_EQ(nearest_name("anything", {}), std::nullopt);
}

TEST(RegistryBuildId, NamesCompilerLibraryAndTesseraMajor) {
  const std::string id(host_build_id());
  EXPECT_NE(id.find(";tessera-"), std::string::npos) << id;
  EXPECT_NE(id.find("libstdc++"), std::string::npos) << id;
}

}  // namespace
}  // namespace tessera
