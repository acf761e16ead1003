#pragma once
// Shared by the fault tests: plugins from the build's plugin folder, and /dev/shm listings.

#include <filesystem>
#include <map>
#include <string>
#include <vector>

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
