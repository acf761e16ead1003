// What only the tcp store does: tokens, reconnecting, finding the server from the environment.
#include <gtest/gtest.h>
#include <stdlib.h>

#include <thread>

#include "tessera/error.hpp"
#include "tessera/registry.hpp"
#include "tessera/store.hpp"

namespace tessera {
namespace {

using namespace std::chrono_literals;

class TcpStoreTest : public ::testing::Test {
 protected:
  void SetUp() override { registry_.scan_directory(TESSERA_PLUGIN_DIR); }

  std::shared_ptr<Store> create(std::map<std::string, std::string> values) {
    const auto defaults = registry_.default_options(PluginKind::store, "tcp");
    return registry_.create<Store>(
        "tcp", Options(defaults.section(), defaults.specs(), std::move(values)));
  }
  std::shared_ptr<Store> serve(const std::string& port = "0") {
    return create({{"serve", "true"}, {"port", port}, {"token", "right-token"}});
  }
  static std::string port_of(const Store& store) {
    const auto address = store.address();
    return address.substr(address.rfind(':') + 1);
  }

  PluginRegistry registry_;
};

TEST_F(TcpStoreTest, ServerBindsLoopbackOnAFreePortByDefault) {
  auto server = serve();
  EXPECT_TRUE(server->address().starts_with("127.0.0.1:")) << server->address();
  EXPECT_NE(port_of(*server), "0");
}

TEST_F(TcpStoreTest, AClientWithTheWrongTokenIsRefusedWithAClearError) {
  auto server = serve();
  auto intruder = create(
      {{"host", "127.0.0.1"}, {"port", port_of(*server)}, {"token", "wrong"}, {"timeout", "5s"}});
  const auto start = std::chrono::steady_clock::now();
  try {
    intruder->set("k", "v");
    FAIL() << "the store accepted a wrong token";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("store refused the token"), std::string::npos) << e.what();
  }
  // Refusal is final, not a transient error to retry until the timeout.
  EXPECT_LT(std::chrono::steady_clock::now() - start, 2s);
  EXPECT_FALSE(server->check("k"));
}

TEST_F(TcpStoreTest, AClientReconnectsToARestartedServerWithinItsTimeout) {
  auto server = serve();
  const auto port = port_of(*server);
  auto client =
      create({{"host", "127.0.0.1"}, {"port", port}, {"token", "right-token"}, {"timeout", "20s"}});
  client->set("before", "1");
  server.reset();  // the server goes away with its data
  std::thread restart([&] {
    std::this_thread::sleep_for(300ms);
    server = serve(port);
  });
  client->set("after", "2");  // retries until the new server listens
  restart.join();
  EXPECT_EQ(server->get("after", 1s), "2");
  EXPECT_FALSE(server->check("before"));
}

TEST_F(TcpStoreTest, AClientGivesUpWhenNoServerAppearsWithinItsTimeout) {
  std::string port;
  {
    auto gone = serve();
    port = port_of(*gone);
  }
  auto client = create(
      {{"host", "127.0.0.1"}, {"port", port}, {"token", "right-token"}, {"timeout", "300ms"}});
  const auto start = std::chrono::steady_clock::now();
  EXPECT_THROW(client->set("k", "v"), Error);
  EXPECT_LT(std::chrono::steady_clock::now() - start, 5s);
}

TEST_F(TcpStoreTest, AClientWithoutOptionsFindsTheServerThroughTheEnvironment) {
  auto server = serve();
  ::setenv("TESSERA_STORE_ADDR", server->address().c_str(), 1);
  ::setenv("TESSERA_STORE_TOKEN", "right-token", 1);
  std::shared_ptr<Store> client;
  EXPECT_NO_THROW(client = create({}));
  ::unsetenv("TESSERA_STORE_ADDR");
  ::unsetenv("TESSERA_STORE_TOKEN");
  ASSERT_TRUE(client);
  client->set("via-env", "yes");
  EXPECT_EQ(server->get("via-env", 1s), "yes");
}

TEST_F(TcpStoreTest, AClientWithNoServerAddressAnywhereIsAConfigError) {
  ::unsetenv("TESSERA_STORE_ADDR");
  EXPECT_THROW((void)create({{"token", "t"}}), ConfigError);
}

TEST_F(TcpStoreTest, AServerWithoutATokenIsAConfigError) {
  ::unsetenv("TESSERA_STORE_TOKEN");
  EXPECT_THROW((void)create({{"serve", "true"}}), ConfigError);
}

TEST_F(TcpStoreTest, AServerOnAPortInUseFailsClearly) {
  auto first = serve();
  EXPECT_THROW((void)serve(port_of(*first)), Error);
}

}  // namespace
}  // namespace tessera
