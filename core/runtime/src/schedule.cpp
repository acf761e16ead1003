#include "tessera/runtime/schedule.hpp"

#include <cmath>
#include <numbers>
#include <string>

#include "tessera/base/error.hpp"

namespace tessera {

ScheduleKind parse_schedule_kind(std::string_view name) {
  if (name == "constant") return ScheduleKind::constant;
  if (name == "step") return ScheduleKind::step;
  if (name == "cosine") return ScheduleKind::cosine;
  throw ConfigError("unknown learning-rate schedule '" + std::string(name) +
                    "' (valid: constant, step, cosine)");
}

std::string_view schedule_kind_name(ScheduleKind kind) noexcept {
  switch (kind) {
    case ScheduleKind::constant: return "constant";
    case ScheduleKind::step: return "step";
    case ScheduleKind::cosine: return "cosine";
  }
  return "unknown";
}

// These are the user's values ([train] lr, step_size, ...), so a refusal is a ConfigError with
// the figures; check_run finds the same mistakes earlier, with where each value was written.
void validate(const LrSchedule& schedule) {
  const auto refuse = [](const std::string& what) { throw ConfigError("[train] " + what); };
  if (!(schedule.base_lr >= 0.0F))
    refuse("lr = " + std::to_string(schedule.base_lr) + " is negative");
  switch (schedule.kind) {
    case ScheduleKind::constant: return;
    case ScheduleKind::step:
      if (schedule.step_size < 1) {
        refuse("step_size = " + std::to_string(schedule.step_size) +
               ": the step schedule needs "
               "at least 1");
      }
      if (!(schedule.gamma >= 0.0F)) {
        refuse("gamma = " + std::to_string(schedule.gamma) + " is negative");
      }
      return;
    case ScheduleKind::cosine:
      if (schedule.warmup_steps < 0) {
        refuse("warmup_steps = " + std::to_string(schedule.warmup_steps) + " is negative");
      }
      if (schedule.total_steps <= schedule.warmup_steps) {
        refuse("warmup_steps = " + std::to_string(schedule.warmup_steps) +
               " leaves no steps to decay: the run has " + std::to_string(schedule.total_steps) +
               " steps");
      }
      if (!(schedule.min_lr >= 0.0F && schedule.min_lr <= schedule.base_lr)) {
        refuse("min_lr = " + std::to_string(schedule.min_lr) +
               " is not in [0, lr = " + std::to_string(schedule.base_lr) + "]");
      }
      return;
  }
}

float learning_rate_at(const LrSchedule& schedule, std::int64_t step) {
  TESSERA_CHECK(step >= 1, "steps count from 1");
  // Computed in double and rounded once, so the rate is the same whatever the call site.
  const double base = schedule.base_lr;
  switch (schedule.kind) {
    case ScheduleKind::constant: return schedule.base_lr;
    case ScheduleKind::step: {
      const auto decays = static_cast<double>((step - 1) / schedule.step_size);
      return static_cast<float>(base * std::pow(static_cast<double>(schedule.gamma), decays));
    }
    case ScheduleKind::cosine: {
      if (step <= schedule.warmup_steps) {
        return static_cast<float>(base * static_cast<double>(step) /
                                  static_cast<double>(schedule.warmup_steps));
      }
      if (step >= schedule.total_steps) return schedule.min_lr;
      const double t = static_cast<double>(step - schedule.warmup_steps) /
                       static_cast<double>(schedule.total_steps - schedule.warmup_steps);
      const double floor = schedule.min_lr;
      return static_cast<float>(floor +
                                (base - floor) * 0.5 * (1.0 + std::cos(std::numbers::pi * t)));
    }
  }
  throw InvalidArgument("unknown schedule kind");
}

}  // namespace tessera
