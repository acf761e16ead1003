// What a plugin hands out — an exception, an exception_ptr, a Work — stays usable and
// destructible after the registry and every object of that plugin are gone. Each test keeps the
// plugin's error past that point, then reads it and destroys it: both run code of the plugin's
// file (a vtable, a destructor, std::make_exception_ptr's destructor thunk), which crashed when
// the library was unmapped with its last object.
#include <dlfcn.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "../unit/etcd_server.hpp"
#include "abi_test_support.hpp"
#include "tessera/base/error.hpp"
#include "tessera/plugin/communicator.hpp"
#include "tessera/plugin/optimizer.hpp"
#include "tessera/plugin/store.hpp"
#include "tessera/plugin/transport.hpp"
#include "tessera/plugin/work.hpp"
#include "tessera/registry/registry.hpp"

namespace tessera {
namespace {

using abi_test::contains;
using abi_test::plugin_file;
using namespace std::chrono_literals;

std::exception_ptr error_of(const std::function<void()>& action) {
  try {
    action();
  } catch (...) {
    return std::current_exception();
  }
  ADD_FAILURE() << "the action threw nothing";
  return nullptr;
}

std::string message_of(const std::exception_ptr& error) {
  try {
    std::rethrow_exception(error);
  } catch (const std::exception& e) {
    return e.what();
  } catch (...) {
    return "(not a std::exception)";
  }
}

bool is_mapped(const std::filesystem::path& file) {
  void* handle = dlopen(file.c_str(), RTLD_NOW | RTLD_NOLOAD);
  if (handle == nullptr) return false;
  dlclose(handle);
  return true;
}

// A registry over the plugin folder beside libtessera (the real transports and stores).
std::unique_ptr<PluginRegistry> installed_plugins() {
  auto registry = std::make_unique<PluginRegistry>();
  registry->scan(PluginRegistry::default_search_path());
  return registry;
}

Options options_for(const PluginRegistry& registry, PluginKind kind, const std::string& name,
                    const std::map<std::string, std::string>& changes) {
  const Options defaults = registry.default_options(kind, name);
  auto values = defaults.values();
  for (const auto& [key, value] : changes) values[key] = value;
  return Options(defaults.section(), defaults.specs(), values);
}

TEST(PluginErrorLifetime, FactoryErrorOutlivesTheRegistry) {
  auto registry = std::make_unique<PluginRegistry>();
  (void)registry->load_file(plugin_file("factory_throws_local"));
  auto error =
      error_of([&] { (void)registry->create<Optimizer>("abi_factory_throws_local", Options{}); });
  registry.reset();

  EXPECT_EQ(message_of(error), "abi_factory_throws_local refuses to be built");
  EXPECT_THROW(std::rethrow_exception(error), InvalidArgument);
  error = nullptr;  // the plugin's destructor thunk runs here
}

TEST(PluginErrorLifetime, MethodErrorOutlivesTheRegistryAndTheObject) {
  auto registry = std::make_unique<PluginRegistry>();
  (void)registry->load_file(plugin_file("step_throws_local"));
  auto optimizer = registry->create<Optimizer>("abi_step_throws_local", Options{});
  std::vector<float> params{1.0F};
  const std::vector<float> grads{1.0F};
  auto error = error_of([&] { optimizer->step(params, grads, {}, StepInfo{7, 0.1F}); });
  registry.reset();
  optimizer.reset();

  EXPECT_EQ(message_of(error), "abi_step_throws_local refuses step 7");
  error = nullptr;
}

TEST(PluginErrorLifetime, LibraryStaysMappedOnceLoaded) {
  // Not counted by objects: nothing tells the registry when the last exception_ptr, callback
  // or thread_local that points into a plugin is gone.
  auto registry = std::make_unique<PluginRegistry>();
  (void)registry->load_file(plugin_file("step_throws_local"));
  (void)registry->create<Optimizer>("abi_step_throws_local", Options{});
  registry.reset();
  EXPECT_TRUE(is_mapped(plugin_file("step_throws_local")));
}

// Every real transport: the error of an operation on an aborted group, thrown by Work::wait and
// held by the Work itself, outlives the registry, the transport, the communicator and its store.
class TransportErrorLifetime : public ::testing::TestWithParam<std::string> {};

TEST_P(TransportErrorLifetime, WorkAndItsErrorOutliveEveryPluginObject) {
  auto registry = installed_plugins();
  ASSERT_NE(registry->try_find(PluginKind::transport, GetParam()), nullptr)
      << GetParam() << " is not built";
  std::shared_ptr<Store> store = registry->create<Store>("memory", Options{});
  auto transport = registry->create<Transport>(GetParam(), Options{});
  auto communicator = transport->connect(store, 0, 1, 30s);
  communicator->abort("the test aborts the group");

  std::vector<float> data{1.0F, 2.0F};
  std::shared_ptr<Work> work;
  auto error = error_of([&] {
    work = communicator->all_reduce(view_of(std::span<float>(data)), ReduceOp::sum);
    work->wait(10s);
  });
  registry.reset();
  transport.reset();
  communicator.reset();
  store.reset();

  ASSERT_NE(work, nullptr) << message_of(error);
  EXPECT_TRUE(work->test());
  auto held = work->exception();
  ASSERT_NE(held, nullptr);
  EXPECT_THROW(work->wait(1s), TransportError);
  work.reset();
  EXPECT_TRUE(contains(message_of(held), "the test aborts the group"));
  EXPECT_TRUE(contains(message_of(error), "the test aborts the group"));
  EXPECT_THROW(std::rethrow_exception(error), TransportError);
  held = nullptr;
  error = nullptr;
}

INSTANTIATE_TEST_SUITE_P(EveryTransport, TransportErrorLifetime,
                         ::testing::Values("local", "shm", "ucx"),
                         [](const auto& param) { return param.param; });

// Every real store: a timed-out get, a lease that is not alive, and a store that can no longer
// answer, outlive the registry and the store.
class StoreErrorLifetime : public ::testing::TestWithParam<std::string> {};

TEST_P(StoreErrorLifetime, ErrorsOutliveTheStoreAndTheRegistry) {
  auto registry = installed_plugins();
  ASSERT_NE(registry->try_find(PluginKind::store, GetParam()), nullptr)
      << GetParam() << " is not built";
  const auto folder = std::filesystem::path(::testing::TempDir()) /
                      ("tessera_error_lifetime_" + std::to_string(::getpid()));
  std::map<std::string, std::string> changes;
  if (GetParam() == "file") changes = {{"path", folder.string()}, {"timeout", "1s"}};
  if (GetParam() == "tcp") changes = {{"serve", "true"}, {"token", "t"}, {"timeout", "1s"}};
  std::unique_ptr<store_test::EtcdServer> etcd;
  if (GetParam() == "etcd") {
    etcd = std::make_unique<store_test::EtcdServer>();
    changes = {{"endpoints", etcd->endpoint()}, {"prefix", "lifetime/"}, {"timeout", "1s"}};
  }
  auto store = registry->create<Store>(
      GetParam(), options_for(*registry, PluginKind::store, GetParam(), changes));

  auto timed_out = error_of([&] { (void)store->get("never-set", 20ms); });
  auto waited = error_of([&] { store->wait({"never-set"}, 20ms); });
  auto expired = error_of([&] { store->keep_alive(LeaseId{}); });
  std::exception_ptr unreachable;  // a store whose server is gone
  if (etcd) {
    etcd->kill_now();
    unreachable = error_of([&] { store->set("k", "v"); });
  }
  registry.reset();
  store.reset();
  std::filesystem::remove_all(folder);

  EXPECT_THROW(std::rethrow_exception(timed_out), Timeout);
  EXPECT_TRUE(contains(message_of(timed_out), "never-set"));
  EXPECT_TRUE(contains(message_of(waited), "never-set"));
  EXPECT_THROW(std::rethrow_exception(expired), LeaseExpired);
  EXPECT_TRUE(contains(message_of(expired), "new lease"));
  if (etcd) {
    EXPECT_TRUE(contains(message_of(unreachable), "store.etcd.endpoints"));
  }
  timed_out = nullptr;
  unreachable = nullptr;
  waited = nullptr;
  expired = nullptr;
}

INSTANTIATE_TEST_SUITE_P(EveryStore, StoreErrorLifetime,
                         ::testing::Values("memory", "file", "tcp", "etcd"),
                         [](const auto& param) { return param.param; });

}  // namespace
}  // namespace tessera
