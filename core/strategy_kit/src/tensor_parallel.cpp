#include "tessera/strategy_kit/tensor_parallel.hpp"

#include <algorithm>
#include <string>

#include "tessera/base/error.hpp"

namespace tessera {
namespace {

void sum_in_place(Communicator& group, Tensor& tensor) {
  if (group.size() == 1 || tensor.count() == 0) return;
  group.all_reduce(tensor.view(), ReduceOp::sum)->wait(group.timeout());
}

// The slice as runs of contiguous elements: `outer` runs of `run` elements, run k starting at
// k * run in the slice and at k * stride + start in the whole parameter.
struct SliceRuns {
  std::size_t outer = 1;
  std::size_t run = 0;
  std::size_t stride = 0;
  std::size_t start = 0;
};

SliceRuns runs_of(const ParamSpec& spec, std::size_t whole_size, std::size_t part_size) {
  const Shape& full = spec.full_shape();
  TESSERA_CHECK(whole_size == element_count(full) && part_size == element_count(spec.shape),
                spec.name + ": slice copy of " + std::to_string(part_size) + " of " +
                    std::to_string(whole_size) + " elements does not match the parameter");
  if (spec.slice.whole()) return {1, whole_size, whole_size, 0};
  const ParamSlice& s = spec.slice;
  TESSERA_CHECK(s.dim < full.size() && s.begin < s.end && s.end <= full[s.dim],
                spec.name + ": slice [" + std::to_string(s.begin) + ", " + std::to_string(s.end) +
                    ") of dimension " + std::to_string(s.dim) + " is outside the parameter");
  std::size_t inner = 1;
  for (std::size_t d = s.dim + 1; d < full.size(); ++d) inner *= full[d];
  std::size_t outer = 1;
  for (std::size_t d = 0; d < s.dim; ++d) outer *= full[d];
  return {outer, (s.end - s.begin) * inner, full[s.dim] * inner, s.begin * inner};
}

}  // namespace

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
    if (role != TensorParallelRole::replicate) open = role == TensorParallelRole::column;
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

void TensorParallelPlan::after_forward(std::size_t layer, Tensor& output) const {
  if (role(layer) == TensorParallelRole::row) all_reduce_row_output(*group_, output);
}

void TensorParallelPlan::after_backward(std::size_t layer, Tensor& grad_input) const {
  if (role(layer) == TensorParallelRole::column) {
    all_reduce_column_input_gradient(*group_, grad_input);
  }
}

void copy_slice_from_whole(const ParamSpec& spec, std::span<const float> whole,
                           std::span<float> part) {
  const SliceRuns r = runs_of(spec, whole.size(), part.size());
  for (std::size_t k = 0; k < r.outer; ++k) {
    std::copy_n(whole.begin() + static_cast<std::ptrdiff_t>(k * r.stride + r.start), r.run,
                part.begin() + static_cast<std::ptrdiff_t>(k * r.run));
  }
}

void copy_slice_into_whole(const ParamSpec& spec, std::span<const float> part,
                           std::span<float> whole) {
  const SliceRuns r = runs_of(spec, whole.size(), part.size());
  for (std::size_t k = 0; k < r.outer; ++k) {
    std::copy_n(part.begin() + static_cast<std::ptrdiff_t>(k * r.run), r.run,
                whole.begin() + static_cast<std::ptrdiff_t>(k * r.stride + r.start));
  }
}

}  // namespace tessera
