#include <gtest/gtest.h>

#include <chrono>
#include <string>
#include <thread>
#include <vector>

#include "blocked_call.hpp"
#include "memory_store.hpp"
#include "tessera/base/error.hpp"
#include "tessera/plugin/store.hpp"

namespace tessera {
namespace {

using std::chrono::milliseconds;

TEST(MemoryStore, SetThenGetReturnsTheValueIncludingBinaryBytes) {
  auto store = memory::make_memory_store();
  const std::string binary("a\0b", 3);
  store->set("k", binary);
  EXPECT_EQ(store->get("k", milliseconds(10)), binary);
  store->set("k", "v2");
  EXPECT_EQ(store->get("k", milliseconds(10)), "v2");
}

TEST(MemoryStore, GetWaitsForAKeySetByAnotherThread) {
  auto store = memory::make_memory_store();
  testing::BlockedCall get;
  std::thread setter([&] {
    EXPECT_TRUE(get.wait_until_blocked()) << "the get did not wait for the key";
    store->set("late", "here");
  });
  get.entering();
  EXPECT_EQ(store->get("late", milliseconds(10000)), "here");
  get.returned();
  setter.join();
}

TEST(MemoryStore, GetOfAMissingKeyThrowsTimeoutNamingTheKey) {
  auto store = memory::make_memory_store();
  const auto start = std::chrono::steady_clock::now();
  try {
    (void)store->get("never", milliseconds(50));
    FAIL() << "get returned";
  } catch (const Timeout& e) {
    EXPECT_NE(std::string(e.what()).find("'never'"), std::string::npos) << e.what();
  }
  EXPECT_GE(std::chrono::steady_clock::now() - start, milliseconds(50));
}

TEST(MemoryStore, WaitThrowsTimeoutNamingOnlyTheMissingKeys) {
  auto store = memory::make_memory_store();
  store->set("present", "1");
  try {
    store->wait({"present", "gone1", "gone2"}, milliseconds(20));
    FAIL() << "wait returned";
  } catch (const Timeout& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find("'gone1', 'gone2'"), std::string::npos) << what;
    EXPECT_EQ(what.find("'present'"), std::string::npos) << what;
  }
  store->set("gone1", "");
  store->set("gone2", "");
  store->wait({"present", "gone1", "gone2"}, milliseconds(0));
}

TEST(MemoryStore, AddIsAtomicAcrossThreads) {
  auto store = memory::make_memory_store();
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&] {
      for (int i = 0; i < 500; ++i) store->add("counter", 1);
    });
  }
  for (auto& t : threads) t.join();
  EXPECT_EQ(store->add("counter", 0), 2000);
  EXPECT_EQ(store->get("counter", milliseconds(0)), "2000");
  EXPECT_EQ(store->add("counter", -2001), -1);
}

TEST(MemoryStore, AddOnANonIntegerValueIsRefused) {
  auto store = memory::make_memory_store();
  store->set("text", "abc");
  EXPECT_THROW(store->add("text", 1), InvalidArgument);
  EXPECT_EQ(store->get("text", milliseconds(0)), "abc");
}

TEST(MemoryStore, CompareSetSwapsOnlyWhenTheExpectedValueMatches) {
  auto store = memory::make_memory_store();
  EXPECT_EQ(store->compare_set("k", "x", "y"), "");  // absent does not match "x"
  EXPECT_FALSE(store->check("k"));
  EXPECT_EQ(store->compare_set("k", "", "first"), "first");  // absent matches ""
  EXPECT_EQ(store->compare_set("k", "", "second"), "first");
  EXPECT_EQ(store->compare_set("k", "first", "third"), "third");
}

TEST(MemoryStore, CheckAndRemoveReportExistence) {
  auto store = memory::make_memory_store();
  EXPECT_FALSE(store->check("k"));
  EXPECT_FALSE(store->remove("k"));
  store->set("k", "v");
  EXPECT_TRUE(store->check("k"));
  EXPECT_TRUE(store->remove("k"));
  EXPECT_FALSE(store->check("k"));
  EXPECT_TRUE(store->address().empty());
}

}  // namespace
}  // namespace tessera
