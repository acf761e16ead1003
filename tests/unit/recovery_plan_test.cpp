// plan_recovery: who gives which old rank's state after a failure, decided from what every rank
// of the new world holds. Table tests over the cases a regroup meets: survivors with their own
// copies, copies of the dead on their ring neighbours, copies of a whole state, newcomers that
// hold nothing, refreshes that landed on some ranks and not on others, and states lost with
// every copy.
#include <gtest/gtest.h>

#include <ostream>
#include <string>
#include <vector>

#include "copy_ring.hpp"
#include "tessera/base/error.hpp"

namespace tessera::elastic {
namespace {

// A copy at `step` that can give the old ranks listed (of `n` old ranks).
HeldCopy copy(std::int64_t step, std::vector<int> gives, int n) {
  HeldCopy c{step, false, std::vector<bool>(static_cast<std::size_t>(n))};
  for (const int old : gives) c.can_give[static_cast<std::size_t>(old)] = true;
  return c;
}

HeldCopy whole_copy(std::int64_t step, int n) {
  return {step, true, std::vector<bool>(static_cast<std::size_t>(n), true)};
}

struct Case {
  std::string name;
  int old_size;
  std::vector<int> previous_rank;  // by new rank
  std::vector<std::vector<HeldCopy>> held;
  std::int64_t step;
  bool whole;
  std::vector<int> giver;
  std::vector<int> missing;
};

// ctest and gtest name a case by its name, not its bytes.
void PrintTo(const Case& c, std::ostream* out) {
  *out << c.name;
}

std::vector<Case> cases() {
  return {
      // 3 ranks, replicas = 1 (rank r's copy on r+1); rank 1 died after step 7.
      {"TheDeadRanksCopyComesFromItsRingNeighbour",
       3,
       {0, 2},
       {{copy(7, {0, 2}, 3), copy(6, {0, 2}, 3)}, {copy(7, {2, 1}, 3), copy(6, {2, 1}, 3)}},
       7,
       false,
       {0, 1, 1},
       {}},
      // Rank 1's copy of step 7 had not landed on rank 2 when rank 1 died: step 6 is whole.
      {"ARefreshThatDidNotLandEverywhereFallsBackOneStep",
       3,
       {0, 2},
       {{copy(7, {0, 2}, 3), copy(6, {0, 2}, 3)}, {copy(7, {2}, 3), copy(6, {2, 1}, 3)}},
       6,
       false,
       {0, 1, 1},
       {}},
      // ddp-like: every copy holds the whole state; the first holder at the newest step gives it.
      {"AWholeCopyIsGivenByItsFirstHolderAlone",
       3,
       {1, 2},
       {{whole_copy(5, 3), whole_copy(4, 3)}, {whole_copy(6, 3), whole_copy(5, 3)}},
       6,
       true,
       {1, 1, 1},
       {}},
      // A newcomer (previous rank -1) holds nothing and gives nothing.
      {"ANewcomerGivesNothing",
       2,
       {0, 1, -1},
       {{copy(9, {0, 1}, 2)}, {copy(9, {1, 0}, 2)}, {}},
       9,
       false,
       {0, 1},
       {}},
      // Survivors give their own state even when a lower rank holds a copy of it.
      {"ASurvivorGivesItsOwnState",
       3,
       {0, 1, 2},
       {{copy(3, {0, 1, 2}, 3)}, {copy(3, {1}, 3)}, {copy(3, {2}, 3)}},
       3,
       false,
       {0, 1, 2},
       {}},
      // Ranks 1 and 2 of 4 died together with replicas = 1: rank 1's only copy was on rank 2.
      {"TwoNeighboursDeadTakeAStateWithNoCopyLeft",
       4,
       {0, 3},
       {{copy(12, {0, 3}, 4), copy(11, {0, 3}, 4)}, {copy(12, {3, 2}, 4), copy(11, {3, 2}, 4)}},
       -1,
       false,
       {-1, -1, -1, -1},
       {1}},
      // With replicas = 2 the same double failure is survived.
      {"TwoNeighboursDeadWithTwoReplicasAreSurvived",
       4,
       {0, 3},
       {{copy(12, {0, 3, 2}, 4)}, {copy(12, {3, 2, 1}, 4)}},
       12,
       false,
       {0, 1, 0, 1},
       {}},
      // The survivors' newest steps differ by one (one finished a refresh the other did not):
      // what is missing is reported at the older of the two.
      {"MissingStatesAreNamedAtTheNewestStepEveryHolderHas",
       3,
       {0, 1},
       {{copy(8, {0}, 3), copy(7, {0}, 3)}, {copy(7, {1}, 3)}},
       -1,
       false,
       {-1, -1, -1},
       {2}},
  };
}

class RecoveryPlanTable : public ::testing::TestWithParam<Case> {};

TEST_P(RecoveryPlanTable, PlansTheNewestWholeStepAndItsGivers) {
  const auto& c = GetParam();
  const auto plan = plan_recovery(c.held, c.previous_rank, c.old_size);
  EXPECT_EQ(plan.step, c.step);
  EXPECT_EQ(plan.whole, c.whole);
  EXPECT_EQ(plan.giver, c.giver);
  EXPECT_EQ(plan.missing, c.missing);
}

INSTANTIATE_TEST_SUITE_P(Cases, RecoveryPlanTable, ::testing::ValuesIn(cases()),
                         [](const auto& test) { return test.param.name; });

TEST(RecoveryPlan, HoldingsThatDoNotNameEveryNewRankAreRefused) {
  EXPECT_THROW((void)plan_recovery({{copy(1, {0}, 1)}}, {0, 1}, 1), InvalidArgument);
}

}  // namespace
}  // namespace tessera::elastic
