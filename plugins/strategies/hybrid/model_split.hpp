#pragma once
// How the hybrid strategy cuts a model: its layers into pipeline stages (contiguous ranges) and
// its Linear pairs into tensor-parallel slices (column- then row-parallel). Pure functions of
// the model and the sizes, so every rank computes the same cut without communicating.

#include <cstddef>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "tessera/plugin/model.hpp"
#include "tessera/strategy_kit/flat_state.hpp"

namespace tessera::hybrid {

enum class PartitionKind : std::uint8_t { uniform, balanced };

// "uniform" or "balanced"; throws ConfigError naming [strategy.hybrid] partition otherwise.
[[nodiscard]] PartitionKind parse_partition(const std::string& name);

// Model layers [first, last) of one pipeline stage.
struct StageRange {
  std::size_t first = 0;
  std::size_t last = 0;
  friend bool operator==(const StageRange&, const StageRange&) = default;
};

// Cuts layers 0 .. costs.size() - 1 into `stages` non-empty contiguous ranges, in order.
// uniform: near-equal layer counts, the first stages one layer larger when they do not divide
// (costs are ignored). balanced: the largest stage cost (the sum of its layers' costs) is as
// small as it can be, which is what bounds a pipeline's step time; among the cuts that reach it,
// earlier stages take as many layers as they can. Throws ConfigError naming
// [strategy.hybrid] pipeline_parallel when there are fewer layers than stages.
[[nodiscard]] std::vector<StageRange> partition_layers(std::span<const double> costs,
                                                       std::size_t stages, PartitionKind kind);

// A per-sample cost estimate of each layer's forward and backward, for `balanced`: two
// multiply-adds per parameter element (a Linear uses each weight once per sample) plus the
// elements of its output (element-wise work such as an activation); a first layer fed integer
// ids (an embedding) counts its output only. Relative values only.
[[nodiscard]] std::vector<double> estimated_layer_costs(const Model& model);

// Which layers run column- and row-parallel over a tensor group of `tensor_parallel` ranks:
// a layer that splits as a pair of its own (role pair: a GPT block) runs so; in a model that
// derives from VocabularyParallelModel (model.hpp), a layer that splits by vocabulary (role
// vocabulary: the gpt embedding and head) runs so; then, scanning forward, a layer that can be
// split column-parallel (Layer::sliced), followed by layers that cannot be split, hold no
// parameters and keep their input's shape (element-wise), then a layer that can be split
// row-parallel, form a pair; every other layer is replicated. All replicate for tensor_parallel
// = 1. Throws ConfigError naming [strategy.hybrid] tensor_parallel and the layer when it is above
// 1 and the model has no such pair, when it does not divide the features (or heads) a column,
// row or pair split splits (each tensor rank must hold exactly 1/tp of them; a vocabulary may
// split unevenly, TensorSlice::range_of), when a vocabulary has fewer tokens than tensor ranks,
// and when a layer whose output is a vocabulary slice (a head) is not the model's last.
[[nodiscard]] std::vector<TensorParallelRole> tensor_parallel_roles(const Model& model,
                                                                    int tensor_parallel);

// The classes of the logits tensor rank `slice` holds when the model's last layer splits its
// output by vocabulary (a head with role vocabulary): [begin, end) of the vocabulary, whose loss
// the model's VocabularyParallelModel computes (`group` left null for the caller to set);
// nullopt when the logits are whole on every tensor rank. Throws ConfigError naming the layer
// when its output is not the range TensorSlice::range_of gives the rank.
[[nodiscard]] std::optional<VocabularySlice> vocabulary_slice_of(
    const Model& model, std::span<const TensorParallelRole> roles, TensorSlice slice);

// Throws ConfigError naming both layers unless every parameter that several layers use (a tie,
// ParamSpec::tied_to) is held alike by all of them on every tensor rank: whole by all, or the
// same slice of it (the gpt head and embedding split by the same vocabulary rows), so that it
// stays one storage, one gradient and one optimizer state. `layout` is FlatLayout::of(model).
void check_tied_slices(const Model& model, const FlatLayout& layout,
                       std::span<const TensorParallelRole> roles, int tensor_parallel);

// The tensor-parallel plan as a table a person reads at start-up: for each layer its index,
// name, how it is split and the bytes of parameters one tensor rank holds of it (of the first
// rank, which holds the most when a split is uneven) beside the whole layer's. Pure: the
// same text on every rank.
[[nodiscard]] std::string describe_tensor_parallel_plan(const Model& model,
                                                        std::span<const TensorParallelRole> roles,
                                                        int tensor_parallel);

}  // namespace tessera::hybrid
