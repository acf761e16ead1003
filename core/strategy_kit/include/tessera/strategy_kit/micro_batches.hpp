#pragma once
// How a data-parallel strategy splits one step's local batch into micro-batches, and weights
// their gradients so that the strategies agree to the bit: ddp, zero1/2 and zero3 all run
// their forward and backward passes through run_micro_batches.

#include <cstddef>
#include <memory>
#include <utility>

#include "tessera/base/trace.hpp"
#include "tessera/plugin/communicator.hpp"
#include "tessera/plugin/dataset.hpp"
#include "tessera/plugin/model.hpp"
#include "tessera/plugin/optimizer.hpp"
#include "tessera/plugin/strategy.hpp"

namespace tessera {

// Rows of a batch tensor ([n, ...]); 0 for an empty one.
[[nodiscard]] std::size_t batch_rows(const Tensor& tensor);
// Rows [begin, end) of a batch tensor, copied (a Tensor owns its whole storage).
[[nodiscard]] Tensor slice_rows(const Tensor& tensor, std::size_t begin, std::size_t end);

// The global batch of a step: info.global_batch_size when the trainer says it, else every one
// of `world` ranks is taken to have `local_rows`. Throws InvalidArgument naming `strategy` when
// the step has no sample at all.
[[nodiscard]] std::size_t global_batch_rows(std::size_t local_rows, std::size_t world,
                                            const StepInfo& info, const char* strategy);

// What one micro-batch's pass returns, summed over its counted targets (LossResult's).
struct PassTotals {
  double loss_sum = 0.0;
  std::size_t targets = 0;
  std::size_t correct = 0;
};

// What a training forward of the micro-batch whose row 0 is row `first_row` of this rank's batch
// draws from (LayerRange::training): the run's seed, the step, and the micro-batch's place in the
// global batch (info.batch_offset + first_row).
[[nodiscard]] inline TrainingDraw training_draw(const StrategySetup& setup, const StepInfo& info,
                                                std::size_t first_row = 0) {
  return {setup.seed, info.step, info.batch_offset + first_row};
}

// Runs `pass(inputs, targets, gradient_weight, last, draw)` for `count` micro-batches of `batch`:
// near-equal row ranges, the first ones one row larger, in order; `last` is true for the final
// one. `batch_draw` is the draw of the batch's row 0 (training_draw(setup, info)); each pass gets
// its micro-batch's, first_sample moved on by the rows before it. The weight
// world * rows / global scales each micro-batch's mean gradient so that the average over ranks of
// the summed gradients is the mean over the global batch (exactly 1 with equal shares and one
// micro-batch, when nothing needs scaling). With one micro-batch the batch's own tensors are
// passed, without a copy; a micro-batch with no rows gets empty tensors. Each pass is a
// "micro_batch" trace span (strategy_kit/trace.hpp) with its index and rows. Returns the sums of
// what the passes returned.
template <class Pass>
PassTotals run_micro_batches(const Batch& batch, std::size_t count, std::size_t world,
                             std::size_t global, const TrainingDraw& batch_draw, Pass&& pass) {
  const std::size_t n = batch_rows(batch.inputs);
  PassTotals totals;
  std::size_t begin = 0;
  for (std::size_t k = 0; k < count; ++k) {
    const std::size_t rows = n / count + (k < n % count ? 1 : 0);
    const bool last = k + 1 == count;
    const auto weight =
        static_cast<float>(static_cast<double>(world * rows) / static_cast<double>(global));
    const trace::Span span(
        "micro_batch", "compute",
        {{"micro_batch", static_cast<std::int64_t>(k)}, {"rows", static_cast<std::int64_t>(rows)}});
    TrainingDraw draw = batch_draw;
    draw.first_sample += begin;
    PassTotals part;
    if (count == 1) {
      part = pass(batch.inputs, batch.targets, weight, last, draw);
    } else if (rows == 0) {
      part = pass(Tensor(), Tensor(), weight, last, draw);
    } else {
      part = pass(slice_rows(batch.inputs, begin, begin + rows),
                  slice_rows(batch.targets, begin, begin + rows), weight, last, draw);
    }
    totals.loss_sum += part.loss_sum;
    totals.targets += part.targets;
    totals.correct += part.correct;
    begin += rows;
  }
  return totals;
}

// A step's loss over every rank: the sum and the count of targets, summed in one collective.
struct LossOverRanks {
  double sums[2] = {0.0, 0.0};  // loss_sum, targets

  explicit LossOverRanks(const PassTotals& local)
      : sums{local.loss_sum, static_cast<double>(local.targets)} {}
  // The mean per target (0 when no rank counted one), once the sum is complete.
  [[nodiscard]] double mean() const noexcept { return sums[1] == 0.0 ? 0.0 : sums[0] / sums[1]; }
};

// A step's stats from this rank's totals and, once summed, the loss over every rank (the
// gradient norm is the strategy's to set).
[[nodiscard]] StepStats step_stats(const PassTotals& local, const LossOverRanks& all);
// An evaluation batch's stats from its loss.
[[nodiscard]] StepStats evaluation_stats(const LossResult& result);

// Starts summing a step's loss over the ranks of `world`, in place; nullptr with one rank.
// Issue it at the same point of the step on every rank (after the gradient reductions), since
// it takes a place in the collective order.
[[nodiscard]] std::shared_ptr<Work> sum_loss_over_ranks(Communicator& world, LossOverRanks& loss);

// The same for a strategy whose buffers come from `memory`: a world that moves host memory sums
// in place as above; one that moves device memory only (nccl) sums through a buffer of `memory`
// at once, and nullptr comes back.
[[nodiscard]] std::shared_ptr<Work> sum_loss_over_ranks(Communicator& world,
                                                        DeviceAllocator* memory,
                                                        LossOverRanks& loss);

}  // namespace tessera
