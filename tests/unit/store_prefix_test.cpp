#include <gtest/gtest.h>

#include <chrono>
#include <memory>

#include "memory_store.hpp"
#include "tessera/base/error.hpp"
#include "tessera/plugin/store.hpp"

namespace tessera {
namespace {

using std::chrono::milliseconds;

TEST(PrefixStore, KeysLandUnderThePrefixInTheInnerStore) {
  auto inner = memory::make_memory_store();
  PrefixStore job("job7", inner);
  job.set("addr", "x");
  EXPECT_EQ(inner->get("job7/addr", milliseconds(0)), "x");
  EXPECT_EQ(job.add("n", 2), 2);
  EXPECT_EQ(inner->get("job7/n", milliseconds(0)), "2");
  EXPECT_EQ(job.compare_set("c", "", "v"), "v");
  EXPECT_TRUE(inner->check("job7/c"));
  EXPECT_TRUE(job.remove("c"));
  EXPECT_FALSE(inner->check("job7/c"));
}

TEST(PrefixStore, TwoPrefixesOverOneStoreDoNotCollide) {
  auto inner = memory::make_memory_store();
  auto a = std::make_shared<PrefixStore>("a", inner);
  PrefixStore b("b", inner);
  a->set("k", "from a");
  EXPECT_FALSE(b.check("k"));
  PrefixStore nested("inner", a);  // prefixes compose
  nested.set("k", "deep");
  EXPECT_EQ(inner->get("a/inner/k", milliseconds(0)), "deep");
}

TEST(PrefixStore, WaitTimesOutNamingThePrefixedMissingKey) {
  PrefixStore store("grp", memory::make_memory_store());
  store.set("here", "1");
  try {
    store.wait({"here", "absent"}, milliseconds(10));
    FAIL() << "wait returned";
  } catch (const Timeout& e) {
    EXPECT_NE(std::string(e.what()).find("grp/absent"), std::string::npos) << e.what();
  }
  EXPECT_THROW((void)store.get("absent", milliseconds(5)), Timeout);
}

TEST(PrefixStore, RefusesANullInnerStore) {
  EXPECT_THROW(PrefixStore("p", nullptr), InvalidArgument);
}

}  // namespace
}  // namespace tessera
