// Where the registry looks for plugins, and how it suggests names.
#include <gtest/gtest.h>

#include <cstdlib>

#include "tessera/registry.hpp"

namespace tessera {
namespace {

TEST(RegistrySearchPath, InTreeFolderBesideLibtesseraThenPluginPathInOrder) {
  ASSERT_EQ(::setenv("TESSERA_PLUGIN_PATH", "/opt/a::/opt/b", 1), 0);
  const auto dirs = PluginRegistry::default_search_path();
  ::unsetenv("TESSERA_PLUGIN_PATH");
  ASSERT_EQ(dirs.size(), 3U);
  EXPECT_EQ(dirs[0].filename(), "plugins");
  EXPECT_EQ(dirs[0].parent_path().filename(), "tessera");
  EXPECT_TRUE(std::filesystem::exists(dirs[0].parent_path().parent_path() / "libtessera.so"));
  EXPECT_EQ(dirs[1], "/opt/a");
  EXPECT_EQ(dirs[2], "/opt/b");
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
