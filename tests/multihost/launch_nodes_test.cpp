// `tessera launch` across nodes, played on one host: one launcher per node on loopback, node 0
// serving the store, each starting its share of the ranks.
#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/socket.h>

#include <filesystem>

#include "shell_job.hpp"

namespace {

namespace fs = std::filesystem;
using namespace std::chrono_literals;
using tessera::test::contains;
using tessera::test::read_text;
using tessera::test::ShellJob;

constexpr const char* kToken = "0123456789abcdef0123456789abcdef";

int free_port() {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  ::bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr);
  socklen_t len = sizeof addr;
  ::getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len);
  ::close(fd);
  return ntohs(addr.sin_port);
}

class LaunchNodes : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() /
           ("tessera-launch-nodes-" + std::to_string(::getpid()) + "-" +
            ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(dir_);
    fs::create_directories(dir_);
    store_ = "127.0.0.1:" + std::to_string(free_port());
  }
  void TearDown() override { fs::remove_all(dir_); }

  // `tessera launch` as node `node` of `nodes`, its stdout and stderr in node<N>.out/.err.
  std::string node(int node, int nodes, const std::string& rest,
                   const std::string& env = std::string("TESSERA_STORE_TOKEN=") + kToken) const {
    const auto base = (dir_ / ("node" + std::to_string(node))).string();
    return "env " + env + " " + TESSERA_CLI_PATH + " launch --nnodes " + std::to_string(nodes) +
           " --node-rank " + std::to_string(node) + " --store " + store_ + " --timeout 40s " +
           rest + " > " + base + ".out 2> " + base + ".err";
  }
  std::string out(int node) const {
    return read_text(dir_ / ("node" + std::to_string(node) + ".out"));
  }
  std::string err(int node) const {
    return read_text(dir_ / ("node" + std::to_string(node) + ".err"));
  }

  fs::path dir_;
  std::string store_;
};

TEST_F(LaunchNodes, TwoLaunchersFormOneWorldWithGlobalRanks) {
  ShellJob second(node(1, 2, std::string("-n 2 -- ") + TESSERA_TEST_WORKER + " rendezvous"));
  ShellJob first(node(0, 2, std::string("-n 2 -- ") + TESSERA_TEST_WORKER + " rendezvous"));
  ASSERT_EQ(first.wait(50s), 0) << err(0);
  ASSERT_EQ(second.wait(50s), 0) << err(1);
  EXPECT_TRUE(contains(out(0), "[rank 0] rank 0 of 4 (local 0 of 2) agreed on 4 arrivals"))
      << out(0);
  EXPECT_TRUE(contains(out(0), "[rank 1] rank 1 of 4 (local 1 of 2) agreed on 4 arrivals"))
      << out(0);
  EXPECT_TRUE(contains(out(1), "[rank 2] rank 2 of 4 (local 0 of 2) agreed on 4 arrivals"))
      << out(1);
  EXPECT_TRUE(contains(out(1), "[rank 3] rank 3 of 4 (local 1 of 2) agreed on 4 arrivals"))
      << out(1);
}

TEST_F(LaunchNodes, AFailureOnOneNodeStopsTheWorkersOfTheOther) {
  // Rank 3 (node 1) exits with 3; every other rank would wait 30 s unless stopped.
  const auto work = std::string("-n 2 -- ") + TESSERA_TEST_WORKER + " exit 3 3";
  const auto started = std::chrono::steady_clock::now();
  ShellJob first(node(0, 2, work));
  ShellJob second(node(1, 2, work));
  EXPECT_EQ(second.wait(50s), 3) << err(1);
  EXPECT_EQ(first.wait(50s), 3) << err(0);
  EXPECT_LT(std::chrono::steady_clock::now() - started, 15s);
  EXPECT_TRUE(contains(err(1), "rank 3 exited with code 3")) << err(1);
  EXPECT_TRUE(contains(err(0), "node 1: rank 3 exited with code 3")) << err(0);
}

TEST_F(LaunchNodes, ANodeStartingADifferentNumberOfWorkersIsRefused) {
  ShellJob first(node(0, 2, std::string("-n 2 -- ") + TESSERA_TEST_WORKER + " sleep"));
  // Node 0 has claimed its count once its workers run; only then does node 1 come.
  const auto until = std::chrono::steady_clock::now() + 30s;
  while (!contains(out(0), "ready") && std::chrono::steady_clock::now() < until)
    std::this_thread::sleep_for(50ms);
  ShellJob second(node(1, 2, std::string("-n 1 -- ") + TESSERA_TEST_WORKER + " sleep"));
  EXPECT_EQ(second.wait(50s), 2) << err(1);
  EXPECT_TRUE(contains(err(1), "every node must pass the same -n")) << err(1);
  // Node 0's workers wait for a world that never completes: stop it here.
  (void)first.wait(0s);
}

TEST_F(LaunchNodes, SeveralNodesWithoutASharedTokenAreRefused) {
  ShellJob lone(node(0, 2, std::string("-n 1 -- ") + TESSERA_TEST_WORKER + " sleep",
                     "-u TESSERA_STORE_TOKEN"));
  EXPECT_EQ(lone.wait(20s), 2) << err(0);
  EXPECT_TRUE(contains(err(0), "needs the same store token on every node")) << err(0);
}

TEST_F(LaunchNodes, AShortSharedTokenIsRefused) {
  ShellJob lone(node(0, 2, std::string("-n 1 -- ") + TESSERA_TEST_WORKER + " sleep",
                     "TESSERA_STORE_TOKEN=short"));
  EXPECT_EQ(lone.wait(20s), 2) << err(0);
  EXPECT_TRUE(contains(err(0), "needs at least 16")) << err(0);
}

TEST_F(LaunchNodes, ANodeWithTheWrongTokenIsRefusedByNodeZerosStore) {
  ShellJob first(node(0, 2, std::string("-n 1 -- ") + TESSERA_TEST_WORKER + " sleep"));
  ShellJob second(node(1, 2, std::string("-n 1 -- ") + TESSERA_TEST_WORKER + " sleep",
                       "TESSERA_STORE_TOKEN=ffffffffffffffffffffffffffffffff"));
  EXPECT_NE(second.wait(30s), 0) << err(1);
  EXPECT_TRUE(contains(err(1), "refused the token")) << err(1);
  (void)first.wait(0s);
}

}  // namespace
