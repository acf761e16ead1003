#pragma once
// Shared by the config tests: a scratch folder for INI files and a registry holding only the
// config-test plugins (cfg_sgd, cfg_store), so that no other plugin changes the outcome.

#include <gtest/gtest.h>
#include <unistd.h>

#include <atomic>
#include <filesystem>
#include <fstream>
#include <string>

#include "tessera/base/error.hpp"
#include "tessera/config/config.hpp"

namespace tessera::config_test {

inline const std::filesystem::path kPluginDir = TESSERA_CONFIG_TEST_PLUGIN_DIR;

class ScratchDir {
 public:
  ScratchDir() {
    static std::atomic<int> counter{0};
    path_ = std::filesystem::temp_directory_path() /
            ("tessera_config_test_" + std::to_string(::getpid()) + "_" + std::to_string(counter++));
    std::filesystem::create_directories(path_);
  }
  ~ScratchDir() {
    std::error_code ec;
    std::filesystem::remove_all(path_, ec);
  }
  ScratchDir(const ScratchDir&) = delete;
  ScratchDir& operator=(const ScratchDir&) = delete;

  std::filesystem::path write(const std::string& name, const std::string& text) const {
    const auto file = path_ / name;
    std::ofstream(file) << text;
    return file;
  }
  [[nodiscard]] const std::filesystem::path& path() const { return path_; }

 private:
  std::filesystem::path path_;
};

// Sources that never read the process environment.
inline ConfigSources sources(std::optional<std::filesystem::path> file = {},
                             std::map<std::string, std::string> env = {},
                             std::vector<std::string> flags = {}) {
  ConfigSources s;
  s.file = std::move(file);
  s.environment = std::move(env);
  s.flags = std::move(flags);
  return s;
}

inline ::testing::AssertionResult contains(const std::string& text, const std::string& part) {
  if (text.find(part) != std::string::npos) return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure() << "'" << text << "' does not contain '" << part << "'";
}

// Scans the folders `s` names in plugins.path, as a host does before Config::load, but not
// the default search path, whose plugins would change the outcome of these tests.
inline void scan_plugins_path(PluginRegistry& registry, const ConfigSources& s) {
  const PluginSearchPath path = Config::plugin_search_path(s);
  if (!path.named.empty()) registry.scan_named(path.named, path.named_origin);
}

// The ConfigError message scanning `s`'s plugins.path and Config::load give, or a test failure
// if it loads.
inline std::string load_error(const ConfigSources& s) {
  PluginRegistry registry;
  registry.scan_directory(kPluginDir);
  try {
    scan_plugins_path(registry, s);
    (void)Config::load(s, registry);
  } catch (const ConfigError& e) {
    return e.what();
  }
  ADD_FAILURE() << "the config loaded";
  return {};
}

}  // namespace tessera::config_test
