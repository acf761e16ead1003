#pragma once
// Megatron-style tensor parallelism over a tensor group: the all-reduces around a
// column-parallel / row-parallel pair of layers (Layer::sliced builds the layers), and moving a
// parameter slice (ParamSpec::slice) out of and into the whole parameter.

#include <cstddef>
#include <memory>
#include <span>
#include <vector>

#include "tessera/plugin/communicator.hpp"
#include "tessera/plugin/layer.hpp"
#include "tessera/plugin/model.hpp"

namespace tessera {

// Megatron's pair of conjugate operations (f and g of the paper), around layers that never
// communicate themselves:
// - the input of a column-parallel layer is the identity in forward (every tensor rank holds
//   the whole input) and its gradient is summed over the group in backward (each rank's is the
//   part that flows through its own output features);
// - the output of a row-parallel layer is summed over the group in forward (each rank's is a
//   partial product over its input features) and the identity in backward (every rank needs
//   the whole output gradient).
// Both sum in place, block until done (the group's timeout), and are no-ops for one rank. Every
// tensor rank must call them at the same point: they take a place in the group's collective
// order. The sum runs in rank order, so all tensor ranks get the same bits. Errors:
// TransportError and Timeout from the group.
void all_reduce_column_input_gradient(Communicator& tensor_group, Tensor& grad_input);
void all_reduce_row_output(Communicator& tensor_group, Tensor& partial_output);

// Which layers of a model run column- or row-parallel over one tensor group; the layer runner
// (layer_runner.hpp) applies the sums after the layers that need them, and hands a layer split
// with role pair or vocabulary this plan as its TensorGroupSum (LayerContext::set_tensor_group).
// It is also the TensorGroupReductions a loss over a vocabulary slice reduces through
// (VocabularyParallelModel, model.hpp).
// Thread-safety: const methods may run concurrently only on different groups (a communicator
// takes operations from one thread at a time).
class TensorParallelPlan final : public TensorGroupSum, public TensorGroupReductions {
 public:
  // roles[l]: the role of model layer l. Throws InvalidArgument unless the roles form pairs: a
  // column-parallel layer, any replicated layers (element-wise, they see the sliced features),
  // then a row-parallel layer, with no row-parallel layer outside such a pair and no pair or
  // vocabulary layer inside one (its input must be whole).
  TensorParallelPlan(std::shared_ptr<Communicator> tensor_group,
                     std::vector<TensorParallelRole> roles);

  [[nodiscard]] TensorParallelRole role(std::size_t layer) const;
  [[nodiscard]] Communicator& group() const noexcept { return *group_; }

  // The sum a pair or vocabulary layer calls inside its forward and backward
  // (TensorGroupSum::sum), and a vocabulary loss's sums (TensorGroupReductions::sum): any dtype
  // the group reduces, in place.
  void sum(Tensor& partial) const override;
  // The element-wise maximum over the group, in place (TensorGroupReductions::max).
  void max(Tensor& values) const override;
  // What LayerContext::set_tensor_group takes for `layer`: this plan for a pair or vocabulary
  // layer, nullptr for any other (their sums are after_forward's and after_backward's).
  [[nodiscard]] const TensorGroupSum* group_sum_for(std::size_t layer) const;

  // After layer `layer`'s forward: a row-parallel layer's partial output is summed.
  void after_forward(std::size_t layer, Tensor& output) const;
  // After layer `layer`'s backward: a column-parallel layer's input gradient is summed (an
  // empty one, which nothing needs, is left alone on every rank alike).
  void after_backward(std::size_t layer, Tensor& grad_input) const;

 private:
  std::shared_ptr<Communicator> group_;
  std::vector<TensorParallelRole> roles_;
};

// A slice (ParamSpec::slice, blocks included) as `count` runs of `run` contiguous elements: run
// k is elements [k * run, (k + 1) * run) of the slice and starts at whole_start(k) in the whole
// parameter (row-major over spec.full_shape()). A whole spec is one run. Throws InvalidArgument
// when the slice does not fit its whole shape (an interval outside one part, a dimension whose
// extent the blocks do not divide, a shape that is not the slice's).
struct SliceRuns {
  std::size_t count = 1;
  std::size_t run = 0;
  std::size_t blocks = 1;
  std::size_t outer_stride = 0;  // whole elements between indices of the dims before `dim`
  std::size_t block_stride = 0;  // whole elements between parts of `dim`
  std::size_t start = 0;         // of run 0

  [[nodiscard]] std::size_t whole_start(std::size_t k) const noexcept {
    return (k / blocks) * outer_stride + (k % blocks) * block_stride + start;
  }
};
[[nodiscard]] SliceRuns slice_runs(const ParamSpec& spec);

// Copies the slice that `spec` describes out of `whole` (the whole parameter, row-major over
// spec.full_shape()) into `part` (element_count(spec.shape) elements). For a whole spec this is
// a plain copy. Throws InvalidArgument when a size does not match.
void copy_slice_from_whole(const ParamSpec& spec, std::span<const float> whole,
                           std::span<float> part);
// The reverse: writes `part` into its place in `whole`, leaving the rest of `whole` as it is.
void copy_slice_into_whole(const ParamSpec& spec, std::span<const float> part,
                           std::span<float> whole);

}  // namespace tessera
