#pragma once
// Learning-rate schedules: the engine's, not the optimizer's, so every strategy and every shard
// of an optimizer sees the same rate for a step.

#include <cstdint>
#include <string_view>

namespace tessera {

enum class ScheduleKind : std::uint8_t { constant, step, cosine };

struct LrSchedule {
  ScheduleKind kind = ScheduleKind::constant;
  float base_lr = 0.01F;
  // step: lr = base_lr * gamma ^ floor((step - 1) / step_size)
  std::int64_t step_size = 1000;
  float gamma = 0.1F;
  // cosine: linear warm-up from base_lr / warmup_steps to base_lr over warmup_steps, then
  // min_lr + (base_lr - min_lr) * (1 + cos(pi * t)) / 2 with t going 0 -> 1 over the remaining
  // steps up to total_steps, and min_lr after that.
  std::int64_t warmup_steps = 0;
  std::int64_t total_steps = 0;
  float min_lr = 0.0F;
};

// "constant", "step" or "cosine"; throws ConfigError naming the valid ones.
[[nodiscard]] ScheduleKind parse_schedule_kind(std::string_view name);
[[nodiscard]] std::string_view schedule_kind_name(ScheduleKind kind) noexcept;

// Throws ConfigError, with the values, for a schedule that cannot be evaluated (step_size < 1,
// cosine with total_steps <= warmup_steps, negative rates, min_lr above lr).
void validate(const LrSchedule& schedule);

// The rate for update number `step` (1 for the first update, as StepInfo::step). Pure: a
// resumed run gets the same rate for the same step.
[[nodiscard]] float learning_rate_at(const LrSchedule& schedule, std::int64_t step);

}  // namespace tessera
