#include "tessera/strategy_kit/micro_batches.hpp"

#include <cstring>

#include "tessera/base/error.hpp"
#include "tessera/strategy_kit/host_values.hpp"

namespace tessera {

std::size_t batch_rows(const Tensor& tensor) {
  return tensor.count() == 0 ? 0 : tensor.shape().at(0);
}

Tensor slice_rows(const Tensor& tensor, std::size_t begin, std::size_t end) {
  Shape shape = tensor.shape();
  TESSERA_CHECK(begin <= end && end <= shape.at(0),
                "slice_rows: rows [" + std::to_string(begin) + ", " + std::to_string(end) +
                    ") of a batch of " + std::to_string(shape.at(0)));
  const std::size_t row_elements = tensor.count() / shape.at(0);
  shape[0] = end - begin;
  Tensor out(shape, tensor.dtype());
  const std::size_t row_bytes = row_elements * dtype_size(tensor.dtype());
  if (end > begin) {
    std::memcpy(out.view().byte_data(), tensor.view().byte_data() + begin * row_bytes,
                (end - begin) * row_bytes);
  }
  return out;
}

std::size_t global_batch_rows(std::size_t local_rows, std::size_t world, const StepInfo& info,
                              const char* strategy) {
  const std::size_t global =
      info.global_batch_size != 0 ? info.global_batch_size : local_rows * world;
  TESSERA_CHECK(global > 0,
                std::string(strategy) + ": a step needs at least one sample over all ranks");
  return global;
}

StepStats step_stats(const PassTotals& local, const LossOverRanks& all) {
  StepStats stats;
  stats.loss = all.mean();
  stats.correct = local.correct;
  stats.targets = local.targets;
  return stats;
}

StepStats evaluation_stats(const LossResult& result) {
  StepStats stats;
  stats.loss = result.mean();
  stats.correct = result.correct;
  stats.targets = result.targets;
  return stats;
}

std::shared_ptr<Work> sum_loss_over_ranks(Communicator& world, LossOverRanks& loss) {
  if (world.size() == 1) return nullptr;
  return world.all_reduce({loss.sums, 2, DType::f64, Device::cpu()}, ReduceOp::sum);
}

std::shared_ptr<Work> sum_loss_over_ranks(Communicator& world, DeviceAllocator* memory,
                                          LossOverRanks& loss) {
  if (world.size() == 1 || world.moves(Device::cpu())) return sum_loss_over_ranks(world, loss);
  all_reduce_host(world, memory, {loss.sums, 2, DType::f64, Device::cpu()}, ReduceOp::sum);
  return nullptr;
}

}  // namespace tessera
