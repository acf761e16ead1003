#include "tessera/runtime/schedule.hpp"

#include <gtest/gtest.h>

#include <cmath>
#include <numbers>

#include "tessera/base/error.hpp"

namespace tessera {
namespace {

TEST(LrSchedule, ConstantNeverChanges) {
  const LrSchedule s{ScheduleKind::constant, 0.05F};
  EXPECT_EQ(learning_rate_at(s, 1), 0.05F);
  EXPECT_EQ(learning_rate_at(s, 1000000), 0.05F);
}

TEST(LrSchedule, StepDecaysByGammaEveryStepSizeUpdates) {
  LrSchedule s{ScheduleKind::step, 1.0F};
  s.step_size = 10;
  s.gamma = 0.5F;
  EXPECT_FLOAT_EQ(learning_rate_at(s, 1), 1.0F);
  EXPECT_FLOAT_EQ(learning_rate_at(s, 10), 1.0F);
  EXPECT_FLOAT_EQ(learning_rate_at(s, 11), 0.5F);
  EXPECT_FLOAT_EQ(learning_rate_at(s, 21), 0.25F);
}

TEST(LrSchedule, CosineWarmsUpLinearlyThenDecaysToTheFloor) {
  LrSchedule s{ScheduleKind::cosine, 1.0F};
  s.warmup_steps = 10;
  s.total_steps = 110;
  s.min_lr = 0.1F;
  validate(s);
  EXPECT_FLOAT_EQ(learning_rate_at(s, 1), 0.1F);
  EXPECT_FLOAT_EQ(learning_rate_at(s, 5), 0.5F);
  EXPECT_FLOAT_EQ(learning_rate_at(s, 10), 1.0F);
  EXPECT_FLOAT_EQ(learning_rate_at(s, 60), 0.55F);  // half way: the midpoint of lr and min_lr
  const double quarter = 0.1 + 0.9 * 0.5 * (1 + std::cos(std::numbers::pi * 0.25));
  EXPECT_FLOAT_EQ(learning_rate_at(s, 35), static_cast<float>(quarter));
  EXPECT_FLOAT_EQ(learning_rate_at(s, 110), 0.1F);
  EXPECT_FLOAT_EQ(learning_rate_at(s, 500), 0.1F);
}

TEST(LrSchedule, CosineDecreasesMonotonicallyAfterWarmUp) {
  LrSchedule s{ScheduleKind::cosine, 0.3F};
  s.warmup_steps = 5;
  s.total_steps = 50;
  for (std::int64_t t = 6; t < 50; ++t)
    EXPECT_GE(learning_rate_at(s, t), learning_rate_at(s, t + 1));
}

TEST(LrSchedule, RejectsSchedulesThatCannotBeEvaluated) {
  LrSchedule s{ScheduleKind::cosine, 0.1F};
  s.warmup_steps = 10;
  s.total_steps = 10;
  try {
    validate(s);
    ADD_FAILURE() << "a warm-up as long as the run was accepted";
  } catch (const ConfigError& e) {
    // The user's values with the run's figure, and no source path.
    EXPECT_STREQ(e.what(),
                 "[train] warmup_steps = 10 leaves no steps to decay: the run has 10 steps");
  }
  LrSchedule step{ScheduleKind::step, 0.1F};
  step.step_size = 0;
  EXPECT_THROW(validate(step), ConfigError);
  EXPECT_THROW((void)learning_rate_at(LrSchedule{}, 0), InvalidArgument);
}

TEST(LrSchedule, ParsesItsNamesAndRejectsOthers) {
  EXPECT_EQ(parse_schedule_kind("cosine"), ScheduleKind::cosine);
  EXPECT_EQ(schedule_kind_name(ScheduleKind::step), "step");
  EXPECT_THROW((void)parse_schedule_kind("linear"), ConfigError);
}

}  // namespace
}  // namespace tessera
