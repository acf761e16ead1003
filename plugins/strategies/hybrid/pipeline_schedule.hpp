#pragma once
// Pipeline schedules as data: for each stage, the ordered list of what it does with each
// micro-batch — receive its activation, run its forward, send the result on; receive the
// gradient of its output, run its backward, send the gradient of its input back. The strategy
// executes the list; the tests check the lists (order, memory, no deadlock) without running a
// model.

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

namespace tessera::hybrid {

// gpipe: every forward, then every backward (Huang et al. 2019); a stage holds the activations
// of all m micro-batches at once. one_f_one_b: after a warm-up of (stages - stage - 1) forwards,
// each forward is followed by one backward (PipeDream-Flush, Narayanan et al. 2021); a stage
// holds at most (stages - stage) micro-batches. Both have the same bubble,
// (stages - 1) / (m + stages - 1) of a step with equal stage times. Backwards run in micro-batch
// order on every stage in both, so gradients accumulate in the order one rank would add them.
enum class ScheduleKind : std::uint8_t { gpipe, one_f_one_b };

// "gpipe" or "1f1b"; throws ConfigError naming [strategy.hybrid] schedule otherwise.
[[nodiscard]] ScheduleKind parse_schedule(const std::string& name);
[[nodiscard]] const char* schedule_name(ScheduleKind kind) noexcept;

enum class ActionKind : std::uint8_t {
  recv_activation,  // from stage - 1
  forward,
  send_activation,  // to stage + 1
  recv_gradient,    // from stage + 1
  backward,
  send_gradient,  // to stage - 1
};

struct PipelineAction {
  ActionKind kind = ActionKind::forward;
  std::size_t micro_batch = 0;
  friend bool operator==(const PipelineAction&, const PipelineAction&) = default;
};

// What stage `stage` of `stages` does in one step of `micro_batches`, in order. The first stage
// receives no activation and sends no gradient; the last sends no activation and receives no
// gradient (its forward ends in the loss). Throws InvalidArgument for stage >= stages or zero
// stages or micro-batches.
[[nodiscard]] std::vector<PipelineAction> stage_actions(ScheduleKind kind, std::size_t stage,
                                                        std::size_t stages,
                                                        std::size_t micro_batches);

// The most micro-batches whose forward has run and whose backward has not, at any point of
// `actions`: how many sets of activations a stage holds at once.
[[nodiscard]] std::size_t max_in_flight(const std::vector<PipelineAction>& actions);

// Per micro-batch: whether other compute (a forward or backward of another micro-batch) runs
// between its forward and its backward in `actions`. Only then does recomputing its
// activations save memory; the last stage under 1F1B runs each backward right after its
// forward and keeps them. `micro_batches` sizes the result; every micro-batch of `actions`
// must be below it.
[[nodiscard]] std::vector<bool> waits_between_forward_and_backward(
    const std::vector<PipelineAction>& actions, std::size_t micro_batches);

// (stages - 1) / (micro_batches + stages - 1): the idle fraction of a step when every stage
// takes the same time and communication is free.
[[nodiscard]] double theoretical_bubble(std::size_t stages, std::size_t micro_batches);

}  // namespace tessera::hybrid
