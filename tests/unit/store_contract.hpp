#pragma once
// The fixture of the Store contract suites (store_contract_test.cpp, store_lease_test.cpp):
// one "job" per test over each store plugin, loaded through the registry. The first store
// serves (tcp), owns the folder (file) or is the one object every rank shares (memory);
// client() is what another rank would have. The etcd store's tests share one real etcd server
// per test process (etcd_server.hpp), each test under its own key prefix.

#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <map>
#include <memory>
#include <string>

#include "etcd_server.hpp"
#include "tessera/plugin/store.hpp"
#include "tessera/registry/registry.hpp"

namespace tessera::store_test {

inline std::shared_ptr<Store> create_store(const PluginRegistry& registry, const std::string& name,
                                           std::map<std::string, std::string> values) {
  const auto defaults = registry.default_options(PluginKind::store, name);
  return registry.create<Store>(name,
                                Options(defaults.section(), defaults.specs(), std::move(values)));
}

// The etcd server of this test process, started by the first test that needs it.
inline EtcdServer& shared_etcd_server() {
  static EtcdServer server;
  return server;
}

// What a store promises about leases, where it differs from the contract's defaults. The
// suites ask for ttls on the store's grid and allow its slack; a store whose numbers differ
// says so in its README, and refuses (InvalidArgument) a ttl off its grid.
struct LeaseLimits {
  Duration granularity{1};  // every ttl is a multiple of it, and at least it
  Duration expiry_slack = kLeaseExpirySlack;
};

inline LeaseLimits lease_limits(const std::string& store) {
  // etcd counts ttls in whole seconds, and deletes the keys of expired leases from a loop that
  // runs every 500 ms and then commits the deletion: measured 150-600 ms late on an idle host
  // (the etcd store's README), 1 s allowed.
  if (store == "etcd") return {Duration(1000), Duration(1000)};
  return {};
}

class StoreContract : public ::testing::TestWithParam<std::string> {
 protected:
  void SetUp() override {
    registry_.scan_directory(TESSERA_PLUGIN_DIR);
    if (GetParam() == "etcd") {
      // Each run of a test its own keys: under --gtest_repeat a key an earlier run left would
      // let a get or a watch return at once, testing nothing of its waiting.
      static int runs = 0;
      etcd_prefix_ = "tessera_test/" + std::to_string(::getpid()) + "/" +
                     ::testing::UnitTest::GetInstance()->current_test_info()->name() + "/" +
                     std::to_string(++runs) + "/";
      first_ = client();
    } else if (GetParam() == "file") {
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
    if (GetParam() == "etcd")
      return create_store(registry_, "etcd",
                          {{"endpoints", shared_etcd_server().endpoint()},
                           {"prefix", etcd_prefix_},
                           {"timeout", "10s"}});
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

  [[nodiscard]] Duration lease_granularity() const { return lease_limits(GetParam()).granularity; }
  [[nodiscard]] Duration lease_expiry_slack() const {
    return lease_limits(GetParam()).expiry_slack;
  }
  // `wanted`, rounded up to a ttl the store grants.
  [[nodiscard]] Duration lease_ttl(Duration wanted) const {
    const auto step = lease_granularity();
    return std::max(step, (wanted + step - Duration(1)) / step * step);
  }

  static constexpr const char* kToken = "0123456789abcdef";
  PluginRegistry registry_;
  std::filesystem::path folder_;
  std::string etcd_prefix_;
  std::shared_ptr<Store> first_;
};

inline std::string store_param_name(const ::testing::TestParamInfo<std::string>& info) {
  return info.param;
}

}  // namespace tessera::store_test
