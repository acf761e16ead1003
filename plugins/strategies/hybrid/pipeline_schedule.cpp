#include "pipeline_schedule.hpp"

#include <algorithm>
#include <optional>

#include "tessera/base/error.hpp"

namespace tessera::hybrid {

ScheduleKind parse_schedule(const std::string& name) {
  if (name == "gpipe") return ScheduleKind::gpipe;
  if (name == "1f1b") return ScheduleKind::one_f_one_b;
  throw ConfigError("[strategy.hybrid] schedule = " + name +
                    " is not a pipeline schedule; use gpipe or 1f1b");
}

const char* schedule_name(ScheduleKind kind) noexcept {
  return kind == ScheduleKind::gpipe ? "gpipe" : "1f1b";
}

namespace {

class ActionList {
 public:
  ActionList(std::size_t stage, std::size_t stages) : stage_(stage), stages_(stages) {}

  void forward(std::size_t k) {
    if (stage_ > 0) actions_.push_back({ActionKind::recv_activation, k});
    actions_.push_back({ActionKind::forward, k});
    if (stage_ + 1 < stages_) actions_.push_back({ActionKind::send_activation, k});
  }
  void backward(std::size_t k) {
    if (stage_ + 1 < stages_) actions_.push_back({ActionKind::recv_gradient, k});
    actions_.push_back({ActionKind::backward, k});
    if (stage_ > 0) actions_.push_back({ActionKind::send_gradient, k});
  }
  std::vector<PipelineAction> take() { return std::move(actions_); }

 private:
  std::size_t stage_;
  std::size_t stages_;
  std::vector<PipelineAction> actions_;
};

}  // namespace

std::vector<PipelineAction> stage_actions(ScheduleKind kind, std::size_t stage, std::size_t stages,
                                          std::size_t micro_batches) {
  TESSERA_CHECK(stages >= 1 && stage < stages && micro_batches >= 1,
                "stage_actions: stage " + std::to_string(stage) + " of " + std::to_string(stages) +
                    " with " + std::to_string(micro_batches) + " micro-batches");
  ActionList list(stage, stages);
  if (kind == ScheduleKind::gpipe) {
    for (std::size_t k = 0; k < micro_batches; ++k) list.forward(k);
    for (std::size_t k = 0; k < micro_batches; ++k) list.backward(k);
    return list.take();
  }
  // Warm-up fills the pipeline below this stage; then one forward, one backward; the cool-down
  // drains the backwards still owed.
  const std::size_t warmup = std::min(stages - stage - 1, micro_batches);
  std::size_t next_forward = 0;
  std::size_t next_backward = 0;
  while (next_forward < warmup) list.forward(next_forward++);
  while (next_forward < micro_batches) {
    list.forward(next_forward++);
    list.backward(next_backward++);
  }
  while (next_backward < micro_batches) list.backward(next_backward++);
  return list.take();
}

std::size_t max_in_flight(const std::vector<PipelineAction>& actions) {
  std::size_t held = 0;
  std::size_t most = 0;
  for (const auto& action : actions) {
    if (action.kind == ActionKind::forward) most = std::max(most, ++held);
    if (action.kind == ActionKind::backward) --held;
  }
  return most;
}

std::vector<bool> waits_between_forward_and_backward(const std::vector<PipelineAction>& actions,
                                                     std::size_t micro_batches) {
  std::vector<bool> waits(micro_batches, false);
  // The micro-batch whose forward was the last compute action, until the next one runs.
  std::optional<std::size_t> just_forwarded;
  for (const auto& action : actions) {
    if (action.kind != ActionKind::forward && action.kind != ActionKind::backward) continue;
    TESSERA_CHECK(action.micro_batch < micro_batches,
                  "waits_between_forward_and_backward: micro-batch out of range");
    if (just_forwarded &&
        !(action.kind == ActionKind::backward && action.micro_batch == *just_forwarded)) {
      waits[*just_forwarded] = true;
    }
    just_forwarded.reset();
    if (action.kind == ActionKind::forward) just_forwarded = action.micro_batch;
  }
  if (just_forwarded) waits[*just_forwarded] = true;  // a forward never followed by work
  return waits;
}

double theoretical_bubble(std::size_t stages, std::size_t micro_batches) {
  return static_cast<double>(stages - 1) / static_cast<double>(micro_batches + stages - 1);
}

}  // namespace tessera::hybrid
