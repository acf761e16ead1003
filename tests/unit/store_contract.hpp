#pragma once
// The fixture of the Store contract suites (store_contract_test.cpp, store_lease_test.cpp):
// one "job" per test over each store plugin, loaded through the registry. The first store
// serves (tcp), owns the folder (file) or is the one object every rank shares (memory);
// client() is what another rank would have.

#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <map>
#include <memory>
#include <string>

#include "tessera/plugin/store.hpp"
#include "tessera/runtime/registry.hpp"

namespace tessera::store_test {

inline std::shared_ptr<Store> create_store(const PluginRegistry& registry, const std::string& name,
                                           std::map<std::string, std::string> values) {
  const auto defaults = registry.default_options(PluginKind::store, name);
  return registry.create<Store>(name,
                                Options(defaults.section(), defaults.specs(), std::move(values)));
}

class StoreContract : public ::testing::TestWithParam<std::string> {
 protected:
  void SetUp() override {
    registry_.scan_directory(TESSERA_PLUGIN_DIR);
    if (GetParam() == "file") {
      folder_ = std::filesystem::temp_directory_path() /
                ("tessera_store_contract_" + std::to_string(::getpid()) + "_" +
                 ::testing::UnitTest::GetInstance()->current_test_info()->name());
      std::filesystem::remove_all(folder_);
      first_ = create_store(registry_, "file", {{"path", folder_.string()}, {"timeout", "10s"}});
    } else if (GetParam() == "tcp") {
      first_ = create_store(registry_, "tcp",
                            {{"serve", "true"}, {"token", kToken}, {"timeout", "10s"}});
    } else {
      first_ = create_store(registry_, "memory", {});
    }
  }
  void TearDown() override {
    first_.reset();
    if (!folder_.empty()) std::filesystem::remove_all(folder_);
  }

  // Another client of the same store, as another rank would have: ranks of one process share
  // the memory store's one object.
  std::shared_ptr<Store> client() {
    if (GetParam() == "memory") return first_;
    if (GetParam() == "file")
      return create_store(registry_, "file", {{"path", folder_.string()}, {"timeout", "10s"}});
    const auto address = first_->address();
    const auto colon = address.rfind(':');
    return create_store(registry_, "tcp",
                        {{"host", address.substr(0, colon)},
                         {"port", address.substr(colon + 1)},
                         {"token", kToken},
                         {"timeout", "10s"}});
  }

  // Whether the store's clients may live in other processes.
  [[nodiscard]] bool crosses_processes() const { return GetParam() != "memory"; }

  static constexpr const char* kToken = "0123456789abcdef";
  PluginRegistry registry_;
  std::filesystem::path folder_;
  std::shared_ptr<Store> first_;
};

inline std::string store_param_name(const ::testing::TestParamInfo<std::string>& info) {
  return info.param;
}

}  // namespace tessera::store_test
