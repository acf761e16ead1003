// The Store contract of set, get, add, compare_set, wait, check and remove, run over the memory,
// tcp, file and etcd stores, each loaded as a plugin. Leases, watches and listing:
// store_lease_test.cpp.
#include "store_contract.hpp"

#include <gtest/gtest.h>

#include <atomic>
#include <thread>

#include "blocked_call.hpp"
#include "tessera/base/error.hpp"

namespace tessera {
namespace {

using namespace std::chrono_literals;

using store_test::StoreContract;

TEST_P(StoreContract, GetReturnsTheValueSetByAnotherClientBytewise) {
  const std::string value("a\0b\n\xff", 5);
  first_->set("some/key", value);
  EXPECT_EQ(client()->get("some/key", 1s), value);
  first_->set("some/key", "overwritten");
  EXPECT_EQ(client()->get("some/key", 1s), "overwritten");
}

TEST_P(StoreContract, GetWaitsForAKeySetLater) {
  auto other = client();
  testing::BlockedCall get;
  std::thread setter([&] {
    EXPECT_TRUE(get.wait_until_blocked()) << "the get did not wait for the key";
    other->set("late", "here");
  });
  get.entering();
  EXPECT_EQ(first_->get("late", 10s), "here");
  get.returned();
  setter.join();
}

TEST_P(StoreContract, GetOfAMissingKeyTimesOutNamingTheKey) {
  const auto start = std::chrono::steady_clock::now();
  try {
    (void)first_->get("never/set", 200ms);
    FAIL() << "get returned";
  } catch (const Timeout& e) {
    EXPECT_NE(std::string(e.what()).find("never/set"), std::string::npos) << e.what();
  }
  const auto took = std::chrono::steady_clock::now() - start;
  EXPECT_GE(took, 190ms);
  EXPECT_LT(took, 5s);
}

TEST_P(StoreContract, AddCountsFromZeroAndStoresDecimalText) {
  EXPECT_EQ(first_->add("counter", 5), 5);
  EXPECT_EQ(client()->add("counter", -2), 3);
  EXPECT_EQ(first_->get("counter", 1s), "3");
}

TEST_P(StoreContract, AddOnANonIntegerValueIsInvalidArgument) {
  first_->set("text", "hello");
  EXPECT_THROW((void)first_->add("text", 1), InvalidArgument);
  EXPECT_EQ(first_->get("text", 1s), "hello");
}

TEST_P(StoreContract, CompareSetSwapsOnlyWhenTheValueMatches) {
  EXPECT_EQ(first_->compare_set("leader", "", "rank0"), "rank0");  // absent matches ""
  EXPECT_EQ(client()->compare_set("leader", "", "rank1"), "rank0");
  EXPECT_EQ(client()->compare_set("leader", "rank0", "rank1"), "rank1");
  EXPECT_EQ(first_->compare_set("absent", "something", "x"), "");
  EXPECT_FALSE(first_->check("absent"));
}

TEST_P(StoreContract, WaitReturnsOnceEveryKeyExists) {
  auto other = client();
  testing::BlockedCall wait;
  std::thread setter([&] {
    other->set("a", "1");
    EXPECT_TRUE(wait.wait_until_blocked()) << "the wait returned with only one of its keys set";
    other->set("b", "2");
  });
  wait.entering();
  first_->wait({"a", "b"}, 10s);
  wait.returned();
  setter.join();
  EXPECT_TRUE(first_->check("b"));
}

TEST_P(StoreContract, WaitTimesOutNamingOnlyTheMissingKeys) {
  first_->set("present", "1");
  try {
    first_->wait({"present", "missing1", "missing2"}, 150ms);
    FAIL() << "wait returned";
  } catch (const Timeout& e) {
    const std::string message = e.what();
    EXPECT_NE(message.find("missing1"), std::string::npos) << message;
    EXPECT_NE(message.find("missing2"), std::string::npos) << message;
    EXPECT_EQ(message.find("'present'"), std::string::npos) << message;
  }
}

TEST_P(StoreContract, CheckAndRemoveReportWhetherTheKeyExisted) {
  EXPECT_FALSE(first_->check("k"));
  first_->set("k", "v");
  EXPECT_TRUE(client()->check("k"));
  EXPECT_TRUE(client()->remove("k"));
  EXPECT_FALSE(first_->check("k"));
  EXPECT_FALSE(first_->remove("k"));
}

TEST_P(StoreContract, ConcurrentAddsFromManyClientsAreNeverLost) {
  constexpr int kClients = 8;
  constexpr int kAddsEach = 40;
  std::vector<std::thread> threads;
  for (int c = 0; c < kClients; ++c) {
    threads.emplace_back([store = client()] {
      for (int i = 0; i < kAddsEach; ++i) store->add("shared", 1);
    });
  }
  for (auto& t : threads) t.join();
  EXPECT_EQ(first_->get("shared", 1s), std::to_string(kClients * kAddsEach));
}

TEST_P(StoreContract, ABlockedGetDoesNotDelayOtherThreadsOfTheSameClient) {
  auto shared = client();
  std::atomic<bool> got{false};
  testing::BlockedCall get;
  std::thread waiter([&] {
    get.entering();
    EXPECT_EQ(shared->get("released", 10s), "go");
    get.returned();
    got = true;
  });
  ASSERT_TRUE(get.wait_until_blocked()) << "the get never waited";
  const auto start = std::chrono::steady_clock::now();
  shared->set("released", "go");  // the same client object, while the get above is pending
  EXPECT_LT(std::chrono::steady_clock::now() - start, 2s);
  waiter.join();
  EXPECT_TRUE(got);
}

TEST_P(StoreContract, PrefixStoresOverTheSameStoreDoNotCollide) {
  PrefixStore a("job_a", client());
  PrefixStore b("job_b", client());
  a.set("x", "from a");
  b.set("x", "from b");
  EXPECT_EQ(a.get("x", 1s), "from a");
  EXPECT_EQ(first_->get("job_b/x", 1s), "from b");
}

INSTANTIATE_TEST_SUITE_P(EveryStore, StoreContract,
                         ::testing::Values("memory", "tcp", "file", "etcd"),
                         store_test::store_param_name);

}  // namespace
}  // namespace tessera
