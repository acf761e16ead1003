// How Config resolves values: defaults, file < environment < flag, plugin sections.
#include <algorithm>
#include <vector>

#include "config_test_support.hpp"
#include "tessera/plugin/optimizer.hpp"
#include "tessera/plugin/store.hpp"

namespace tessera {
namespace {

using namespace config_test;

TEST(ConfigLoad, EveryCoreOptionHasItsDefault) {
  PluginRegistry registry;
  const Config config = Config::load(sources(), registry);
  const Options& runtime = config.section("runtime");
  EXPECT_EQ(runtime.get_string("transport"), "local");
  EXPECT_EQ(runtime.get_string("store"), "memory");
  EXPECT_EQ(runtime.get_int("world_size"), 1);
  EXPECT_EQ(runtime.get_duration("timeout"), std::chrono::seconds(300));
  EXPECT_EQ(config.section("plugins").get_string("path"), "");
  EXPECT_EQ(config.origin("runtime", "timeout").text, "default");
  const auto names = config.section_names();
  EXPECT_TRUE(std::is_sorted(names.begin(), names.end()));
  for (const auto& [core_section, specs] : Config::core_schema()) {
    EXPECT_NE(std::find(names.begin(), names.end(), core_section), names.end()) << core_section;
  }
}

TEST(ConfigLoad, FlagBeatsEnvironmentBeatsFile) {
  const ScratchDir dir;
  const auto file = dir.write("run.ini", "# comment\n\n[runtime]\nworld_size = 2\ntimeout = 5s\n");
  const std::map<std::string, std::string> env{{"TESSERA_RUNTIME_WORLD_SIZE", "3"}};
  PluginRegistry registry;

  const Config all = Config::load(sources(file, env, {"--runtime.world_size=4"}), registry);
  EXPECT_EQ(all.section("runtime").get_int("world_size"), 4);
  EXPECT_EQ(all.origin("runtime", "world_size").text, "flag --runtime.world_size");
  EXPECT_EQ(all.section("runtime").get_duration("timeout"), std::chrono::seconds(5));
  EXPECT_EQ(all.origin("runtime", "timeout").text, file.string() + ":5");

  const Config no_flag = Config::load(sources(file, env), registry);
  EXPECT_EQ(no_flag.section("runtime").get_int("world_size"), 3);
  EXPECT_EQ(no_flag.origin("runtime", "world_size").text, "environment TESSERA_RUNTIME_WORLD_SIZE");

  const Config file_only = Config::load(sources(file), registry);
  EXPECT_EQ(file_only.section("runtime").get_int("world_size"), 2);
  EXPECT_EQ(file_only.origin("runtime", "world_size").text, file.string() + ":4");
}

TEST(ConfigLoad, FlagValueMayFollowAsTheNextArgument) {
  PluginRegistry registry;
  const Config config = Config::load(
      sources({}, {}, {"--runtime.world_size", "8", "--runtime.timeout=1.5m"}), registry);
  EXPECT_EQ(config.section("runtime").get_int("world_size"), 8);
  EXPECT_EQ(config.section("runtime").get_duration("timeout"), std::chrono::seconds(90));
}

TEST(ConfigLoad, DisabledEnvironmentIsNotRead) {
  ConfigSources s = sources({}, {{"TESSERA_RUNTIME_WORLD_SIZE", "3"}, {"TESSERA_BOGUS", "1"}});
  s.use_environment = false;
  PluginRegistry registry;
  EXPECT_EQ(Config::load(s, registry).section("runtime").get_int("world_size"), 1);
}

TEST(ConfigLoad, PluginsPathInTheFileIsRelativeToTheFileAndScannedFirst) {
  const ScratchDir dir;
  const auto relative = std::filesystem::relative(kPluginDir, dir.path());
  const auto file = dir.write("run.ini", "[plugins]\npath = " + relative.string() +
                                             "\n[optimizer.cfg_sgd]\nlr = 0.25\nmode = exact\n");
  PluginRegistry registry;  // empty: only plugins.path can make [optimizer.cfg_sgd] known
  const PluginSearchPath path = Config::plugin_search_path(sources(file));
  EXPECT_EQ(path.named, std::vector<std::filesystem::path>{kPluginDir.lexically_normal()});
  EXPECT_EQ(path.named_origin, file.string() + ":2 (plugins.path)");
  scan_plugins_path(registry, sources(file));
  const Config config = Config::load(sources(file), registry);
  const Options& sgd = config.plugin(PluginKind::optimizer, "cfg_sgd");
  EXPECT_DOUBLE_EQ(sgd.get_float("lr"), 0.25);
  EXPECT_EQ(sgd.get_string("mode"), "exact");
  EXPECT_EQ(sgd.get_size("bucket"), 1U << 20);
  EXPECT_EQ(config.origin("optimizer.cfg_sgd", "bucket").text, "default");

  auto optimizer = registry.create<Optimizer>("cfg_sgd", sgd);
  std::vector<float> params{1.0F};
  const std::vector<float> grads{2.0F};
  optimizer->step(params, grads, {}, StepInfo{1, 0.0F});
  EXPECT_FLOAT_EQ(params[0], 0.5F);
}

TEST(ConfigLoad, PluginOptionsComeFromTheEnvironment) {
  PluginRegistry registry;
  const std::map<std::string, std::string> env{{"TESSERA_PLUGINS_PATH", kPluginDir.string()},
                                               {"TESSERA_OPTIMIZER_CFG_SGD_NESTEROV", "yes"},
                                               {"TESSERA_RANK", "3"},
                                               {"TESSERA_LAUNCH_ID", "abc"},
                                               {"TESSERA_PLUGIN_PATH", "/nowhere"},
                                               {"PATH", "/usr/bin"}};
  scan_plugins_path(registry, sources({}, env));
  const Config config = Config::load(sources({}, env), registry);
  EXPECT_TRUE(config.plugin(PluginKind::optimizer, "cfg_sgd").get_bool("nesterov"));
}

TEST(ConfigLoad, CoreOptionSelectsAndCreatesThePlugin) {
  PluginRegistry registry;
  const auto s =
      sources({}, {}, {"--plugins.path=" + kPluginDir.string(), "--runtime.store=cfg_store"});
  scan_plugins_path(registry, s);
  const Config config = Config::load(s, registry);
  std::shared_ptr<Store> store = config.create<Store>(registry, "runtime", "store");
  store->set("k", "v");
  EXPECT_EQ(store->get("k", std::chrono::milliseconds(100)), "v");
}

TEST(ConfigLoad, LoadingScansNothingAndRefusesAPluginsPathTheHostDidNotScan) {
  PluginRegistry registry;
  const auto s = sources({}, {}, {"--plugins.path=" + kPluginDir.string()});
  try {
    (void)Config::load(s, registry);
    FAIL() << "a plugins.path nobody scanned was accepted";
  } catch (const InvalidArgument& e) {
    EXPECT_TRUE(contains(e.what(), "flag --plugins.path names the plugin folder '" +
                                       kPluginDir.string() +
                                       "', which the registry has not scanned"));
  }
  EXPECT_TRUE(registry.plugins().empty());
  EXPECT_TRUE(registry.scanned_directories().empty());
}

TEST(ConfigLoad, PluginsPathFlagBeatsEnvironmentBeatsFileAndSplitsAtColons) {
  const ScratchDir dir;
  const auto file = dir.write("run.ini", "[plugins]\npath = a::b\n");
  EXPECT_EQ(Config::plugin_search_path(sources(file)).named,
            (std::vector<std::filesystem::path>{dir.path() / "a", dir.path() / "b"}));
  const std::map<std::string, std::string> env{{"TESSERA_PLUGINS_PATH", "/e1:/e2"}};
  const auto from_env = Config::plugin_search_path(sources(file, env));
  EXPECT_EQ(from_env.named, (std::vector<std::filesystem::path>{"/e1", "/e2"}));
  EXPECT_EQ(from_env.named_origin, "environment TESSERA_PLUGINS_PATH");
  const auto from_flag = Config::plugin_search_path(sources(file, env, {"--plugins.path=/f"}));
  EXPECT_EQ(from_flag.named, std::vector<std::filesystem::path>{"/f"});
  EXPECT_EQ(from_flag.named_origin, "flag --plugins.path");
  EXPECT_EQ(from_flag.defaults, PluginRegistry::default_search_path());
}

}  // namespace
}  // namespace tessera
