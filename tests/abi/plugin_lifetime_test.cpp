// Objects created by a plugin keep working independently of the registry.
#include <dlfcn.h>

#include <memory>
#include <vector>

#include "abi_test_support.hpp"
#include "tessera/plugin/optimizer.hpp"
#include "tessera/registry/registry.hpp"

namespace tessera {
namespace {

using abi_test::plugin_file;

// Whether the dynamic loader still has the file mapped (RTLD_NOLOAD never loads it).
bool is_mapped(const std::filesystem::path& file) {
  void* handle = dlopen(file.c_str(), RTLD_NOW | RTLD_NOLOAD);
  if (handle == nullptr) return false;
  dlclose(handle);
  return true;
}

TEST(PluginLifetime, ObjectStillWorksAfterTheRegistryIsDestroyed) {
  auto registry = std::make_unique<PluginRegistry>();
  (void)registry->load_file(plugin_file("good"));
  std::shared_ptr<Optimizer> optimizer = registry->create<Optimizer>("abi_good", Options{});
  registry.reset();

  ASSERT_TRUE(is_mapped(plugin_file("good")));
  std::vector<float> params{1.0F, 2.0F};
  const std::vector<float> grads{2.0F, -4.0F};
  optimizer->step(params, grads, {}, StepInfo{1, 0.1F});  // virtual call into the plugin
  EXPECT_EQ(params, (std::vector<float>{2.0F, 0.0F}));
  EXPECT_EQ(optimizer->state_per_param(), 0U);
}

TEST(PluginLifetime, ResolvedOptionsReachTheConstructor) {
  PluginRegistry registry;
  const PluginInfo& info = registry.load_file(plugin_file("good"));
  const Options options("optimizer.abi_good", info.options, {{"scale", "2"}});
  auto optimizer = registry.create<Optimizer>("abi_good", options);
  std::vector<float> params{1.0F};
  const std::vector<float> grads{3.0F};
  optimizer->step(params, grads, {}, StepInfo{1, 0.1F});
  EXPECT_EQ(params, std::vector<float>{7.0F});
}

TEST(PluginLifetime, DefaultOptionsHoldEveryDeclaredDefault) {
  PluginRegistry registry;
  (void)registry.load_file(plugin_file("good"));
  const Options options = registry.default_options(PluginKind::optimizer, "abi_good");
  EXPECT_EQ(options.section(), "optimizer.abi_good");
  EXPECT_DOUBLE_EQ(options.get_float("scale"), 0.5);
  EXPECT_EQ(options.get_string("mode"), "plain");
}

}  // namespace
}  // namespace tessera
