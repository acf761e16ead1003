// A rank that never arrives ends in an error naming it, within the configured timeout.

#include <gtest/gtest.h>

#include <chrono>
#include <regex>
#include <string>

#include "memory_store.hpp"
#include "tessera/base/error.hpp"
#include "tessera/plugin/store.hpp"
#include "world.hpp"

namespace tessera::conformance {
namespace {

using std::chrono::milliseconds;
using std::chrono::steady_clock;

constexpr Duration kShort = milliseconds(300);
constexpr auto kPromptly = std::chrono::seconds(10);  // generous: CI machines are loaded

class MissingRank : public ::testing::TestWithParam<std::string> {
 protected:
  void SetUp() override {
    if (const auto why = unavailable(GetParam(), 3)) GTEST_SKIP() << *why;
  }
};

// The message names rank 2 as a rank ("rank 2", "ranks 2", "rank(s) 1, 2", "rank(s) never
// arrived: 2"), not merely contains a 2 somewhere (a timeout of 200 ms, rank 0 of 2).
bool names_rank_two(const std::string& what) {
  static const std::regex pattern(R"(\brank(s|\(s\))?\b[^0-9]{0,20}([0-9]+, )*2\b)");
  return std::regex_search(what, pattern);
}

TEST_P(MissingRank, ConnectOfTwoOutOfThreeRanksTimesOutNamingTheAbsentRank) {
  auto transport = load_transport(GetParam(), kShort);
  auto store = memory::make_memory_store();
  const auto start = steady_clock::now();
  const auto errors =
      run_on_ranks(2, [&](int r) { (void)transport->connect(store, r, 3, kShort); });
  EXPECT_LT(steady_clock::now() - start, kPromptly);
  for (int r = 0; r < 2; ++r) {
    const auto& error = errors[static_cast<std::size_t>(r)];
    ASSERT_NE(error, nullptr) << "rank " << r << " connected without rank 2";
    try {
      std::rethrow_exception(error);
    } catch (const Timeout& e) {
      EXPECT_TRUE(names_rank_two(e.what())) << e.what();
    } catch (const TransportError& e) {
      EXPECT_TRUE(names_rank_two(e.what())) << e.what();
      // Released by a peer's abort, a rank may not know who was late; it must not blame
      // anyone else.
      if (e.peer_rank()) {
        EXPECT_EQ(*e.peer_rank(), 2) << e.what();
      }
    }
  }
}

TEST_P(MissingRank, AllReduceWithoutOneRankFailsNamingTheRankAndTheOperation) {
  if (!peers_hear_of_failures(GetParam())) {
    GTEST_SKIP() << GetParam() << " cannot tell which rank never issued a collective (its own "
                 << "tests check that the group fails at its timeout instead)";
  }
  World world(GetParam(), 3, kShort);
  std::vector<float> values = {1.0F, 2.0F};
  std::vector<std::shared_ptr<Work>> works;
  const auto start = steady_clock::now();
  for (int r = 0; r < 2; ++r) {
    works.push_back(world.rank(r).all_reduce(
        {&values[static_cast<std::size_t>(r)], 1, DType::f32, Device::cpu()}, ReduceOp::sum));
  }
  int blamed_rank_two = 0;
  for (int r = 0; r < 2; ++r) {
    try {
      works[static_cast<std::size_t>(r)]->wait(kTimeout);
      ADD_FAILURE() << "rank " << r << " finished an all_reduce that rank 2 never joined";
    } catch (const TransportError& e) {
      const std::string what = e.what();
      EXPECT_NE(what.find("all_reduce"), std::string::npos) << what;
      EXPECT_TRUE(names_rank_two(what)) << what;
      // A rank released by its peer's abort may not know who was late (no peer_rank), but it
      // must not blame anyone else, and at least one rank must say it was rank 2.
      if (e.peer_rank()) {
        EXPECT_EQ(*e.peer_rank(), 2) << what;
        ++blamed_rank_two;
      }
    }
  }
  EXPECT_GE(blamed_rank_two, 1) << "no rank reported peer_rank() == 2";
  EXPECT_LT(steady_clock::now() - start, kPromptly);
  EXPECT_GE(steady_clock::now() - start, kShort);
}

TEST_P(MissingRank, RecvWithoutASendFailsNamingThePeer) {
  World world(GetParam(), 2, kShort);
  float x = 0;
  auto work = world.rank(1).recv({&x, 1, DType::f32, Device::cpu()}, 0, 3);
  try {
    work->wait(kTimeout);
    FAIL() << "recv completed without a send";
  } catch (const TransportError& e) {
    EXPECT_EQ(e.peer_rank(), std::optional<int>(0)) << e.what();
  }
}

// Work::wait with a deadline shorter than the operation's own raises Timeout and aborts.
TEST_P(MissingRank, WorkWaitPastItsDeadlineThrowsTimeoutAndAbortsTheGroup) {
  World world(GetParam(), 2);
  float x = 0;
  auto work = world.rank(0).all_reduce({&x, 1, DType::f32, Device::cpu()}, ReduceOp::sum);
  EXPECT_THROW(work->wait(milliseconds(50)), Timeout);
  EXPECT_THROW(work->wait(kTimeout), TransportError);  // released by the abort, not by a peer
  EXPECT_THROW(world.rank(1).barrier()->wait(kTimeout), TransportError);
}

std::vector<std::string> transport_names() {
  std::vector<std::string> names;
  for (const auto& transport : transports_under_test()) names.push_back(transport.name);
  return names;
}

INSTANTIATE_TEST_SUITE_P(Transports, MissingRank, ::testing::ValuesIn(transport_names()),
                         [](const auto& test) { return test.param; });

}  // namespace
}  // namespace tessera::conformance
