// Every deliberately broken plugin is refused with a message naming its file and the field.
#include <string>

#include "abi_test_support.hpp"
#include "tessera/base/error.hpp"
#include "tessera/plugin/optimizer.hpp"
#include "tessera/plugin/plugin_abi.h"
#include "tessera/registry/registry.hpp"
#include "tessera/runtime/store_url.hpp"

namespace tessera {
namespace {

using abi_test::contains;
using abi_test::plugin_file;

// The PluginError message load_file() gives for lib<stem>.so, or a test failure if it loads.
std::string refusal_of(const std::string& stem) {
  PluginRegistry registry;
  try {
    (void)registry.load_file(plugin_file(stem));
  } catch (const PluginError& e) {
    return e.what();
  }
  ADD_FAILURE() << plugin_file(stem) << " was accepted";
  return {};
}

std::string prefix(const std::string& stem) {
  return plugin_file(stem).string() + ": ";
}

TEST(PluginRefusal, GoodPluginLoadsWithEveryDescriptorField) {
  PluginRegistry registry;
  const PluginInfo& info = registry.load_file(plugin_file("good"));
  EXPECT_EQ(info.kind, PluginKind::optimizer);
  EXPECT_EQ(info.name, "abi_good");
  EXPECT_TRUE(info.aliases.empty());
  EXPECT_EQ(info.version, "1.2.3");
  EXPECT_EQ(info.description, "test optimizer with a deliberately configurable descriptor");
  EXPECT_EQ(info.file, plugin_file("good"));
  ASSERT_EQ(info.options.size(), 2U);
  EXPECT_EQ(info.options[0].name, "scale");
  EXPECT_EQ(info.options[0].type, OptionType::floating);
  EXPECT_EQ(info.options[0].default_value, "0.5");
  EXPECT_EQ(info.options[1].choices, (std::vector<std::string>{"plain", "fancy"}));
  EXPECT_EQ(info.options[0].minimum, "0");
  EXPECT_EQ(info.options[0].maximum, "4");
  EXPECT_FALSE(info.options[1].minimum.has_value());
  EXPECT_FALSE(info.capabilities.spans_processes);
  EXPECT_FALSE(info.capabilities.spans_hosts);
  EXPECT_TRUE(info.capabilities.devices.empty());
  EXPECT_TRUE(registry.failures().empty());
}

TEST(PluginRefusal, ARangeWhoseMinimumIsAboveItsMaximumIsRefused) {
  EXPECT_TRUE(contains(refusal_of("bad_range"),
                       prefix("bad_range") + "options[0] 'scale': minimum 2 is above maximum 1"));
}

TEST(PluginRefusal, ADefaultOutsideItsOwnRangeIsRefused) {
  EXPECT_TRUE(contains(refusal_of("default_out_of_range"),
                       prefix("default_out_of_range") +
                           "options[0] 'scale': default_value is invalid: '0.5' is out of range"));
}

TEST(PluginRefusal, AnAbi1PluginIsRefusedSayingWhatToRebuildAgainst) {
  EXPECT_TRUE(contains(refusal_of("abi_one"),
                       prefix("abi_one") +
                           "exports tessera_plugin_descriptor_v1: it was built for plugin ABI 1, "
                           "this libtessera speaks ABI 3; rebuild the plugin against this "
                           "tessera's SDK"));
}

// ABI 3 kept the descriptor's layout but changed the model and data set interfaces: a plugin
// built for ABI 2 would read a Model's vtable wrong, so it is refused by name, not loaded.
TEST(PluginRefusal, AnAbi2PluginIsRefusedNamingThePortingGuide) {
  EXPECT_TRUE(contains(refusal_of("abi_two"),
                       prefix("abi_two") +
                           "exports tessera_plugin_descriptor_v2: it was built for plugin ABI 2, "
                           "this libtessera speaks ABI 3; rebuild the plugin against this "
                           "tessera's SDK (docs/plugin-guide.md, \"Porting a plugin from ABI "
                           "2\")"));
}

TEST(PluginRefusal, APluginOfANewerMajorIsRefusedAsNewer) {
  EXPECT_TRUE(contains(refusal_of("abi_major_four"),
                       prefix("abi_major_four") +
                           "exports tessera_plugin_descriptor_v4: it was built for plugin ABI 4, "
                           "newer than this libtessera's ABI 3"));
}

// ABI 3.1 added to what a host offers (the vocabulary-parallel model), not to what it asks of a
// plugin: a 3.0 plugin loads; one of a minor newer than the host's may use what the host lacks.
TEST(PluginRefusal, AnOlderMinorLoadsAndANewerOneIsRefusedNamingBoth) {
  PluginRegistry registry;
  EXPECT_EQ(registry.load_file(plugin_file("abi_minor_zero")).name, "abi_minor_zero");
  const std::string host = "3." + std::to_string(TESSERA_PLUGIN_ABI_MINOR);
  EXPECT_TRUE(contains(refusal_of("abi_minor_newer"),
                       prefix("abi_minor_newer") + "abi_minor is " +
                           std::to_string(TESSERA_PLUGIN_ABI_MINOR + 1) +
                           ", newer than this libtessera's " + host +
                           "; use a newer tessera, or rebuild the plugin against this one"));
}

TEST(PluginRefusal, AMajorFieldThatContradictsTheSymbolIsRefused) {
  EXPECT_TRUE(contains(refusal_of("abi_major_field_one"),
                       prefix("abi_major_field_one") +
                           "abi_major is 1 but the descriptor is exported as "
                           "tessera_plugin_descriptor_v3 (ABI 3)"));
}

TEST(PluginRefusal, CapabilitiesOfAnotherKindAreRefused) {
  EXPECT_TRUE(contains(refusal_of("optimizer_spans_processes"),
                       prefix("optimizer_spans_processes") +
                           "capabilities.flags is 0x1, but a plugin of kind optimizer declares "
                           "none"));
  EXPECT_TRUE(contains(refusal_of("optimizer_with_devices"),
                       prefix("optimizer_with_devices") +
                           "capabilities.devices is 0x1, but a plugin of kind optimizer declares "
                           "none"));
  // A strategy's flag, on an optimizer.
  EXPECT_TRUE(contains(refusal_of("optimizer_replicated_state"),
                       prefix("optimizer_replicated_state") +
                           "capabilities.flags is 0x4, but a plugin of kind optimizer declares "
                           "none"));
}

TEST(PluginRefusal, InTreeTransportsAndStoresDeclareWhatTheyCanDo) {
  PluginRegistry registry;
  registry.scan(PluginRegistry::default_search_path());
  const auto capabilities = [&](PluginKind kind, const char* name) {
    return registry.find(kind, name).capabilities;
  };
  const auto local = capabilities(PluginKind::transport, "local");
  EXPECT_FALSE(local.spans_processes);
  EXPECT_EQ(local.devices, std::vector<DeviceType>{DeviceType::cpu});
  const auto shm = capabilities(PluginKind::transport, "shm");
  EXPECT_TRUE(shm.spans_processes);
  EXPECT_FALSE(shm.spans_hosts);
  if (registry.try_find(PluginKind::transport, "ucx") != nullptr) {
    EXPECT_TRUE(capabilities(PluginKind::transport, "ucx").spans_hosts);
  }
  EXPECT_FALSE(capabilities(PluginKind::store, "memory").spans_processes);
  EXPECT_TRUE(capabilities(PluginKind::store, "tcp").spans_hosts);
  EXPECT_TRUE(capabilities(PluginKind::store, "file").spans_processes);
  // ddp's state is whole on every rank; the zero stages shard it.
  EXPECT_TRUE(capabilities(PluginKind::strategy, "ddp").replicated_state);
  for (const char* sharded : {"zero1", "zero2", "zero3"}) {
    EXPECT_FALSE(capabilities(PluginKind::strategy, sharded).replicated_state) << sharded;
  }
  EXPECT_FALSE(capabilities(PluginKind::transport, "shm").replicated_state);
  // Where a strategy's state may live (ABI 2.3): ddp and the zero stages on a GPU too, hybrid on
  // the host only.
  const std::vector<DeviceType> anywhere = {DeviceType::cpu, DeviceType::cuda};
  for (const char* strategy : {"ddp", "zero1", "zero2", "zero3"}) {
    EXPECT_EQ(capabilities(PluginKind::strategy, strategy).devices, anywhere) << strategy;
  }
  if (registry.try_find(PluginKind::strategy, "hybrid") != nullptr) {
    EXPECT_EQ(capabilities(PluginKind::strategy, "hybrid").devices,
              std::vector<DeviceType>{DeviceType::cpu});
  }
}

TEST(PluginRefusal, WrongBuildIdShowsBothIds) {
  EXPECT_TRUE(contains(refusal_of("wrong_build_id"),
                       prefix("wrong_build_id") +
                           "build_id is 'gcc-1,libfoo,tessera-99', this libtessera was built as '" +
                           std::string(host_build_id()) + "'"));
}

TEST(PluginRefusal, MissingDescriptorSymbolIsNotAPlugin) {
  EXPECT_TRUE(contains(refusal_of("no_descriptor"),
                       prefix("no_descriptor") + "no tessera_plugin_descriptor_v3 symbol"));
}

TEST(PluginRefusal, UnknownKindSuggestsTheNearestKind) {
  const std::string message = refusal_of("wrong_kind");
  EXPECT_TRUE(contains(message, prefix("wrong_kind") + "kind is 'optimiser', not a known kind"));
  EXPECT_TRUE(contains(message, "did you mean 'optimizer'?"));
}

TEST(PluginRefusal, UnknownOptionTypeNamesTheOption) {
  EXPECT_TRUE(
      contains(refusal_of("bad_option_type"),
               prefix("bad_option_type") + "options[0] 'scale': type 'double' is not one of"));
}

TEST(PluginRefusal, UpperCaseNameIsNotAValidName) {
  EXPECT_TRUE(contains(refusal_of("bad_name"),
                       prefix("bad_name") + "name 'Abi Bad' is not a valid plugin name"));
}

TEST(PluginRefusal, TextFileIsNotASharedObject) {
  EXPECT_TRUE(contains(refusal_of("not_a_library"),
                       prefix("not_a_library") + "not a loadable shared object"));
}

TEST(PluginRefusal, MissingFileIsRefusedWithItsPath) {
  EXPECT_TRUE(contains(refusal_of("does_not_exist"), prefix("does_not_exist") + "cannot open"));
}

TEST(PluginRefusal, SecondPluginWithTheSameNameNamesTheFirstFile) {
  PluginRegistry registry;
  (void)registry.load_file(plugin_file("good"));
  try {
    (void)registry.load_file(plugin_file("good_again"));
    FAIL() << "the duplicate was accepted";
  } catch (const PluginError& e) {
    EXPECT_TRUE(contains(e.what(), prefix("good_again") +
                                       "optimizer name 'abi_good' is already "
                                       "taken by " +
                                       plugin_file("good").string()));
  }
  EXPECT_EQ(registry.plugins().size(), 1U);
}

TEST(PluginRefusal, SameFileLoadedTwiceIsOnePlugin) {
  PluginRegistry registry;
  const PluginInfo& first = registry.load_file(plugin_file("good"));
  const PluginInfo& second = registry.load_file(plugin_file("good"));
  EXPECT_EQ(&first, &second);
  EXPECT_EQ(registry.plugins().size(), 1U);
}

TEST(PluginRefusal, ScanRecordsEachBrokenFileAndKeepsTheGoodOnes) {
  PluginRegistry registry;
  registry.scan_directory(TESSERA_ABI_PLUGIN_DIR);
  std::vector<std::string> names;
  for (const auto* info : registry.plugins(PluginKind::optimizer)) names.push_back(info->name);
  EXPECT_EQ(names,
            (std::vector<std::string>{"abi_factory_throws_local", "abi_good", "abi_minor_zero",
                                      "abi_step_throws_local", "abi_throws"}));
  std::vector<std::string> refused;
  for (const auto& failure : registry.failures()) {
    refused.push_back(failure.file.filename().string());
    EXPECT_TRUE(contains(failure.reason, failure.file.string() + ": "));
  }
  EXPECT_EQ(refused,
            (std::vector<std::string>{
                "libabi_major_field_one.so", "libabi_major_four.so", "libabi_minor_newer.so",
                "libabi_one.so", "libabi_two.so", "libbad_name.so", "libbad_option_type.so",
                "libbad_range.so", "libdefault_out_of_range.so", "libgood_again.so",
                "libno_descriptor.so", "libnot_a_library.so", "liboptimizer_replicated_state.so",
                "liboptimizer_spans_processes.so", "liboptimizer_with_devices.so",
                "libscheme_without_factory.so", "libwrong_build_id.so", "libwrong_kind.so"}));
}

TEST(PluginRefusal, AStoreThatDeclaresNoUrlSchemeLoadsAndNoUrlNamesIt) {
  PluginRegistry registry;
  const auto& info = registry.load_file(plugin_file("store_without_scheme"));
  EXPECT_EQ(info.url_scheme, "");
  EXPECT_EQ(registry.find_url_scheme("abiold"), nullptr);
  try {
    (void)parse_store_url(registry, "abiold://h:1", "--store");
    ADD_FAILURE() << "a URL named a store that declares no scheme";
  } catch (const ConfigError& e) {
    EXPECT_TRUE(contains(e.what(), "--store abiold://h:1: unknown scheme 'abiold'"));
    EXPECT_TRUE(contains(e.what(), "the stores abi_store_without_scheme (" +
                                       plugin_file("store_without_scheme").string() +
                                       ") declare no URL scheme, so no URL names them"))
        << e.what();
  }
}

TEST(PluginRefusal, AUrlSchemeWithoutItsFactoryIsRefused) {
  EXPECT_EQ(refusal_of("scheme_without_factory"),
            prefix("scheme_without_factory") +
                "url_scheme is 'abiold' but create_url_scheme is NULL: nothing can read its URLs");
}

TEST(PluginRefusal, MissingFolderIsSkippedSilently) {
  PluginRegistry registry;
  registry.scan_directory("/nonexistent/tessera/plugins");
  EXPECT_TRUE(registry.failures().empty());
  EXPECT_TRUE(registry.plugins().empty());
}

TEST(PluginRefusal, UnknownPluginNameSuggestsTheNearest) {
  PluginRegistry registry;
  (void)registry.load_file(plugin_file("good"));
  try {
    (void)registry.find(PluginKind::optimizer, "abi_god");
    FAIL() << "abi_god was found";
  } catch (const ConfigError& e) {
    EXPECT_TRUE(contains(e.what(),
                         "no optimizer plugin named 'abi_god'; did you mean 'abi_good'? "
                         "(known: abi_good)"));
  }
}

TEST(PluginRefusal, FactoryExceptionIsRethrownWithItsOwnType) {
  PluginRegistry registry;
  (void)registry.load_file(plugin_file("factory_throws"));
  try {
    (void)registry.create<Optimizer>("abi_throws", Options{});
    FAIL() << "the factory did not throw";
  } catch (const InvalidArgument& e) {
    EXPECT_STREQ(e.what(), "abi_throws refuses to be built: scale 0.500000");
  }
}

TEST(PluginRefusal, OptionsOfAnotherSectionAreRefused) {
  PluginRegistry registry;
  (void)registry.load_file(plugin_file("good"));
  const Options foreign("transport.local", {}, {});
  EXPECT_THROW((void)registry.create<Optimizer>("abi_good", foreign), ConfigError);
}

}  // namespace
}  // namespace tessera
