#include "world.hpp"

#include <algorithm>
#include <mutex>
#include <thread>

#include "memory_store.hpp"
#include "staged.hpp"
#include "tessera/base/error.hpp"
#include "tessera/plugin/device_memory_source.hpp"
#include "tessera/plugin/store.hpp"
#include "tessera/registry/registry.hpp"

namespace tessera::conformance {

namespace {

PluginRegistry& registry() {
  static PluginRegistry* loaded = [] {
    auto* r = new PluginRegistry();  // lives for the process: plugin objects may outlive tests
    r->scan(PluginRegistry::default_search_path());
    return r;
  }();
  return *loaded;
}

std::mutex registry_mutex;  // loading is not thread-safe; creating afterwards is

}  // namespace

std::shared_ptr<Transport> load_transport(const std::string& name, Duration op_timeout,
                                          const TransportOptions& options) {
  std::lock_guard lock(registry_mutex);
  PluginRegistry& plugins = registry();
  if (plugins.try_find(PluginKind::transport, name) == nullptr) {
    std::string why;
    for (const auto& failure : plugins.failures())
      why += "\n  " + failure.file.string() + ": " + failure.reason;
    for (const auto& dir : PluginRegistry::default_search_path())
      why += "\n  searched " + dir.string();
    throw PluginError("conformance: transport '" + name + "' not found" + why);
  }
  const Options defaults = plugins.default_options(PluginKind::transport, name);
  TransportOptions values = options;
  values["timeout"] = std::to_string(op_timeout.count()) + "ms";
  return plugins.create<Transport>(name, Options(defaults.section(), defaults.specs(), values));
}

namespace {

// The device rank r's buffers live on, for a transport that moves no host memory: the first
// cuda device its communicator moves.
std::optional<Device> device_of(const Communicator& communicator) {
  if (communicator.moves(Device::cpu())) return std::nullopt;
  if (const auto gpu = gpu_moved_by(communicator)) return gpu;
  throw Error("conformance: the communicator of rank " + std::to_string(communicator.rank()) +
              " moves neither host memory nor any cuda device");
}

bool lists_host_memory(const std::string& name) {
  std::lock_guard lock(registry_mutex);
  const PluginInfo* info = registry().try_find(PluginKind::transport, name);
  if (info == nullptr) return true;
  const auto& devices = info->capabilities.devices;
  return std::find(devices.begin(), devices.end(), DeviceType::cpu) != devices.end();
}

}  // namespace

std::optional<std::string> unavailable(const std::string& transport, int size) {
  if (lists_host_memory(transport)) return std::nullopt;
  const auto loaded = load_transport(transport, kTimeout);
  for (int r = 0; r < size; ++r) {
    try {
      (void)memory_for(*loaded, Device::cuda(r));
    } catch (const Error& e) {
      return std::string("rank ") + std::to_string(r) + ": " + e.what();
    }
  }
  return std::nullopt;
}

std::vector<std::exception_ptr> run_on_ranks(int size, const std::function<void(int rank)>& body) {
  std::vector<std::exception_ptr> errors(static_cast<std::size_t>(size));
  std::vector<std::thread> threads;
  for (int r = 0; r < size; ++r) {
    threads.emplace_back([&, r] {
      try {
        body(r);
      } catch (...) {
        errors[static_cast<std::size_t>(r)] = std::current_exception();
      }
    });
  }
  for (auto& thread : threads) thread.join();
  return errors;
}

World::World(const std::string& transport, int size, Duration op_timeout,
             const TransportOptions& options)
    : transport_(load_transport(transport, op_timeout, options)),
      communicators_(static_cast<std::size_t>(size)) {
  auto store = memory::make_memory_store();
  const auto errors = run_on_ranks(size, [&](int r) {
    communicators_[static_cast<std::size_t>(r)] = transport_->connect(store, r, size, kTimeout);
  });
  for (int r = 0; r < size; ++r) {
    if (auto error = errors[static_cast<std::size_t>(r)]) {
      try {
        std::rethrow_exception(error);
      } catch (const std::exception& e) {
        throw Error("rank " + std::to_string(r) + " could not connect: " + e.what());
      }
    }
  }
  for (auto& communicator : communicators_) {
    if (const auto device = device_of(*communicator)) {
      communicator = staged_on_device(communicator, memory_for(*transport_, *device));
    }
  }
}

void wait_all(const std::vector<std::shared_ptr<Work>>& works) {
  for (const auto& work : works) work->wait(kTimeout);
}

std::vector<WorldParam> every_transport_and_size() {
  std::vector<WorldParam> params;
  for (const auto& transport : transports_under_test()) {
    for (int size : transport.world_sizes) params.push_back({transport.name, size});
  }
  return params;
}

std::vector<WorldParam> every_small_chunk_setting_and_size() {
  std::vector<WorldParam> params;
  for (const auto& transport : transports_under_test()) {
    for (const auto& chunks : transport.small_chunks) {
      for (int size : transport.world_sizes) params.push_back({transport.name, size, &chunks});
    }
  }
  return params;
}

std::string param_name(const ::testing::TestParamInfo<WorldParam>& info) {
  const std::string setting = info.param.chunks ? info.param.chunks->label + "_" : "";
  return info.param.transport + "_" + setting + std::to_string(info.param.size) + "ranks";
}

}  // namespace tessera::conformance
