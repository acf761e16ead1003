#include "tessera/strategy_kit/tensor_parallel.hpp"

#include <algorithm>
#include <string>

#include "tessera/base/error.hpp"

namespace tessera {
namespace {

void reduce_in_place(Communicator& group, Tensor& tensor, ReduceOp op) {
  if (group.size() == 1 || tensor.count() == 0) return;
  group.all_reduce(tensor.view(), op)->wait(group.timeout());
}

void sum_in_place(Communicator& group, Tensor& tensor) {
  reduce_in_place(group, tensor, ReduceOp::sum);
}

// A layer whose input and output are whole on every tensor rank and which sums inside itself.
bool sums_inside(TensorParallelRole role) {
  return role == TensorParallelRole::pair || role == TensorParallelRole::vocabulary;
}

}  // namespace

SliceRuns slice_runs(const ParamSpec& spec) {
  const Shape& full = spec.full_shape();
  const std::size_t whole = element_count(full);
  if (spec.slice.whole()) return {1, whole, 1, whole, 0, 0};
  const ParamSlice& s = spec.slice;
  const bool fits = s.dim < full.size() && s.blocks >= 1 && full[s.dim] % s.blocks == 0 &&
                    s.begin < s.end && s.end <= full[s.dim] / s.blocks;
  if (!fits) {
    throw InvalidArgument(spec.name + ": slice [" + std::to_string(s.begin) + ", " +
                          std::to_string(s.end) + ") of each of " + std::to_string(s.blocks) +
                          " parts of dimension " + std::to_string(s.dim) + " does not fit " +
                          shape_text(full));
  }
  std::size_t inner = 1;
  for (std::size_t d = s.dim + 1; d < full.size(); ++d) inner *= full[d];
  std::size_t outer = 1;
  for (std::size_t d = 0; d < s.dim; ++d) outer *= full[d];
  const std::size_t run = (s.end - s.begin) * inner;
  TESSERA_CHECK(element_count(spec.shape) == outer * s.blocks * run,
                spec.name + ": shape " + shape_text(spec.shape) + " is not its slice's");
  return {outer * s.blocks, run, s.blocks, full[s.dim] * inner, (full[s.dim] / s.blocks) * inner,
          s.begin * inner};
}

void all_reduce_column_input_gradient(Communicator& tensor_group, Tensor& grad_input) {
  sum_in_place(tensor_group, grad_input);
}

void all_reduce_row_output(Communicator& tensor_group, Tensor& partial_output) {
  sum_in_place(tensor_group, partial_output);
}

TensorParallelPlan::TensorParallelPlan(std::shared_ptr<Communicator> tensor_group,
                                       std::vector<TensorParallelRole> roles)
    : group_(std::move(tensor_group)), roles_(std::move(roles)) {
  TESSERA_CHECK(group_ != nullptr, "tensor-parallel plan: needs a tensor group");
  bool open = false;  // inside a column ... row pair
  std::size_t opened_at = 0;
  for (std::size_t l = 0; l < roles_.size(); ++l) {
    const TensorParallelRole role = roles_[l];
    if (sums_inside(role) && open) {
      throw InvalidArgument(
          "tensor-parallel plan: layer " + std::to_string(l) + " is split " +
          (role == TensorParallelRole::pair ? "as a pair of its own" : "by vocabulary") +
          " but sits inside the pair opened by layer " + std::to_string(opened_at) +
          ", where its input is a slice");
    }
    if (role == TensorParallelRole::column && open) {
      throw InvalidArgument("tensor-parallel plan: layer " + std::to_string(l) +
                            " is column-parallel inside the pair opened by layer " +
                            std::to_string(opened_at) + "; close it with a row-parallel layer");
    }
    if (role == TensorParallelRole::row && !open) {
      throw InvalidArgument("tensor-parallel plan: layer " + std::to_string(l) +
                            " is row-parallel but no column-parallel layer before it opens a pair");
    }
    if (role == TensorParallelRole::column) opened_at = l;
    if (role == TensorParallelRole::column || role == TensorParallelRole::row) {
      open = role == TensorParallelRole::column;
    }
  }
  if (open) {
    throw InvalidArgument("tensor-parallel plan: the column-parallel layer " +
                          std::to_string(opened_at) + " has no row-parallel layer after it");
  }
}

TensorParallelRole TensorParallelPlan::role(std::size_t layer) const {
  TESSERA_CHECK(layer < roles_.size(), "tensor-parallel plan: layer " + std::to_string(layer) +
                                           " of " + std::to_string(roles_.size()));
  return roles_[layer];
}

void TensorParallelPlan::sum(Tensor& partial) const {
  sum_in_place(*group_, partial);
}

void TensorParallelPlan::max(Tensor& values) const {
  reduce_in_place(*group_, values, ReduceOp::max);
}

const TensorGroupSum* TensorParallelPlan::group_sum_for(std::size_t layer) const {
  return sums_inside(role(layer)) ? static_cast<const TensorGroupSum*>(this) : nullptr;
}

void TensorParallelPlan::after_forward(std::size_t layer, Tensor& output) const {
  if (role(layer) == TensorParallelRole::row) all_reduce_row_output(*group_, output);
}

void TensorParallelPlan::after_backward(std::size_t layer, Tensor& grad_input) const {
  if (role(layer) == TensorParallelRole::column) {
    all_reduce_column_input_gradient(*group_, grad_input);
  }
}

namespace {

SliceRuns checked_runs(const ParamSpec& spec, std::size_t whole_size, std::size_t part_size) {
  TESSERA_CHECK(
      whole_size == element_count(spec.full_shape()) && part_size == element_count(spec.shape),
      spec.name + ": slice copy of " + std::to_string(part_size) + " of " +
          std::to_string(whole_size) + " elements does not match the parameter");
  return slice_runs(spec);
}

}  // namespace

void copy_slice_from_whole(const ParamSpec& spec, std::span<const float> whole,
                           std::span<float> part) {
  const SliceRuns r = checked_runs(spec, whole.size(), part.size());
  for (std::size_t k = 0; k < r.count; ++k) {
    std::copy_n(whole.begin() + static_cast<std::ptrdiff_t>(r.whole_start(k)), r.run,
                part.begin() + static_cast<std::ptrdiff_t>(k * r.run));
  }
}

void copy_slice_into_whole(const ParamSpec& spec, std::span<const float> part,
                           std::span<float> whole) {
  const SliceRuns r = checked_runs(spec, whole.size(), part.size());
  for (std::size_t k = 0; k < r.count; ++k) {
    std::copy_n(part.begin() + static_cast<std::ptrdiff_t>(k * r.run), r.run,
                whole.begin() + static_cast<std::ptrdiff_t>(r.whole_start(k)));
  }
}

}  // namespace tessera
