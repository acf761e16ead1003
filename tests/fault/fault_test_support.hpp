#pragma once
// Shared by the fault tests: plugins from the build's plugin folder, and /dev/shm listings.

#include <cstdlib>
#include <filesystem>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "tessera/plugin/store.hpp"
#include "tessera/plugin/transport.hpp"
#include "tessera/registry/registry.hpp"

namespace tessera::fault_test {

// How many times longer than a plain build's the timing-based fault tests make their
// watchdog timeouts: under ThreadSanitizer every memory access is checked and a live rank's
// engine thread can go seconds between heartbeats on a loaded machine, which a 2 s
// stall_timeout would take for a stopped rank.
#if defined(__SANITIZE_THREAD__)
inline constexpr int kSanitizerSlowdown = 5;
#elif defined(__SANITIZE_ADDRESS__)
inline constexpr int kSanitizerSlowdown = 2;
#else
inline constexpr int kSanitizerSlowdown = 1;
#endif

inline Options options_for(const PluginRegistry& registry, PluginKind kind, const std::string& name,
                           std::map<std::string, std::string> values = {}) {
  const auto defaults = registry.default_options(kind, name);
  return Options(defaults.section(), defaults.specs(), std::move(values));
}

// What a worker process connects with: the transport plugin it tests and a file store, both
// loaded from the build's plugin folder (TESSERA_PLUGIN_DIR of the test). The registry is
// kept alongside, so that the plugins stay loaded while they are used.
struct WorkerPlugins {
  PluginRegistry registry;
  std::shared_ptr<Store> store;
  std::shared_ptr<Transport> transport;
};

// The file store lives in `folder`, shared by the workers of one test; `options` are the
// transport's, over its defaults.
inline std::unique_ptr<WorkerPlugins> load_worker_plugins(
    const std::string& transport_name, std::map<std::string, std::string> options,
    const std::filesystem::path& folder) {
  auto plugins = std::make_unique<WorkerPlugins>();
  plugins->registry.scan_directory(TESSERA_PLUGIN_DIR);
  plugins->store = plugins->registry.create<Store>(
      "file",
      options_for(plugins->registry, PluginKind::store, "file", {{"path", folder.string()}}));
  plugins->transport = plugins->registry.create<Transport>(
      transport_name,
      options_for(plugins->registry, PluginKind::transport, transport_name, std::move(options)));
  return plugins;
}

// UCX_TLS for this worker process; nullptr: UCX's default transports (on one host, shared
// memory).
inline void use_ucx_tls(const char* tls) {
  if (tls != nullptr) {
    ::setenv("UCX_TLS", tls, 1);
  } else {
    ::unsetenv("UCX_TLS");
  }
}

// Names in /dev/shm that the shm transport created (prefix "tessera-shm-<pid>-") for any of
// `pids`.
inline std::vector<std::string> shm_segments_of(const std::vector<int>& pids) {
  std::vector<std::string> found;
  for (const auto& entry : std::filesystem::directory_iterator("/dev/shm")) {
    const std::string name = entry.path().filename().string();
    for (int pid : pids)
      if (name.rfind("tessera-shm-" + std::to_string(pid) + "-", 0) == 0) found.push_back(name);
  }
  return found;
}

}  // namespace tessera::fault_test
