#pragma once
// Layer: one stage of a model's computation on parameter memory that the strategy owns.

#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "tessera/base/tensor.hpp"

namespace tessera {

enum class ParamInit : std::uint8_t { zeros, ones, kaiming_uniform, xavier_uniform, normal };

// Where a parameter tensor lies inside the whole parameter of the same name: indices
// [begin, end) of dimension `dim` of full_shape, every index of the other dimensions. The
// default (an empty full_shape) is the whole parameter. Checkpoints record it so that a slice
// written at one tensor size can be read back at another.
//
// blocks > 1: dimension `dim` is `blocks` equal parts laid end to end (GPT-2's c_attn rows are
// [Q; K; V]), and the slice takes [begin, end) of each part (begin and end count within one
// part), the parts' pieces one after the other in the slice's `dim`. A rank's heads of Q, K and V
// are one such slice: its rows [Q_heads; K_heads; V_heads] are what the attention expects.
// Checkpoints hold a blocked slice as `blocks` ordinary boxes (one per part), so the format and
// every reader stay those of blocks = 1.
struct ParamSlice {
  std::size_t dim = 0;
  std::size_t begin = 0;
  std::size_t end = 0;
  Shape full_shape;
  std::size_t blocks = 1;

  [[nodiscard]] bool whole() const noexcept { return full_shape.empty(); }
  friend bool operator==(const ParamSlice&, const ParamSlice&) = default;
};

struct ParamSpec {
  std::string name;  // the whole parameter's name, also for a slice of it
  Shape shape;       // of the tensor the layer computes with (the slice, for a sliced layer)
  DType dtype = DType::f32;
  ParamInit init = ParamInit::zeros;
  // Fan-in and fan-out used by kaiming/xavier initialisation: the whole parameter's, so a
  // slice initialises to the bits of the whole (see strategy_kit/init.hpp).
  std::size_t fan_in = 0;
  std::size_t fan_out = 0;
  ParamSlice slice{};     // whole by default
  float init_std = 0.0F;  // the standard deviation of ParamInit::normal (GPT-2: 0.02)
  // Whether the optimizer's weight decay applies to this parameter. The rule of nanoGPT and
  // minGPT: matrices decay; biases, norm gains and embeddings do not (shrinking them toward zero
  // only fights the model). Every strategy hands the optimizer the exempt elements of each
  // buffer it updates (StepInfo::no_weight_decay), a ZeRO shard that spans several parameters
  // included. True by default, so a layer that does not say decays all it has, as before. A tied
  // parameter decays as its owner says.
  bool weight_decay = true;
  // A tie: empty for a parameter of this layer's own; else the name of a parameter that an
  // earlier layer declares, whose storage this layer shares (GPT-2's output head uses the token
  // embedding "wte"). A tied parameter is one parameter under every strategy: one storage, one
  // gradient (every user's contribution summed), one optimizer state, one checkpoint entry, all
  // under the owner's (the earlier layer's) name; its init, fans and name here are ignored. The
  // shape and dtype must equal the owner's (setup refuses otherwise, naming both layers).
  std::string tied_to{};

  // The whole parameter's shape: `shape` unless this is a slice.
  [[nodiscard]] const Shape& full_shape() const noexcept {
    return slice.whole() ? shape : slice.full_shape;
  }
};

// Megatron-style tensor parallelism (Shoeybi et al. 2019) over a tensor group of `size` ranks.
// A column-parallel layer holds the output features [begin, end) of its rank (a Linear's
// weight rows and bias entries) and produces that slice of the output; the row-parallel layer
// after it takes that slice as input, holds the matching input columns of its weight and
// produces a partial output that the tensor group sums. Layers between the two see the sliced
// features and must be element-wise. replicate: the whole layer on every tensor rank.
//
// pair: the layer holds a column-parallel / row-parallel pair (or several) inside itself: a
// transformer block, whose attention and MLP each open and close one, with the residual adds
// and layer norms between them. Its input and output are whole on every tensor rank, so the
// kit does nothing around it; the sums fall inside the layer (after each row-parallel product
// in forward, before each layer norm in backward), and the layer asks for them through
// LayerContext::sum_over_tensor_group. Why a role and a callback rather than two layers: a
// block is one Layer so that every strategy treats it as one unit (zero3 gathers it whole, a
// pipeline cuts between blocks), and the layer, which never holds a communicator, still has to
// sum in the middle of its own computation.
//
// vocabulary (ABI 3.1): Megatron's vocabulary-parallel embedding and output head. The layer's
// table (a token embedding's rows, a head's output rows) splits by vocabulary: tensor rank r
// holds the rows TensorSlice::range_of(vocab) gives it, the first ranks one row more when tp does
// not divide the vocabulary (no padding: a checkpoint keeps the whole table's natural layout). As
// for pair, the input is whole on every tensor rank, the kit does nothing around the layer and
// the layer sums through LayerContext::sum_over_tensor_group: an embedding looks up the ids in its
// rows, zeros for the others, and sums, so its output is whole; a head computes the logits of its
// rows only (its output is [..., its rows]: the whole vocabulary's logits are never formed on one
// rank) and sums its input gradient in backward. Such a head must be the model's last layer, and
// its model reads the slice in its loss (VocabularyParallelModel, model.hpp). A strategy asks a
// layer for this role only in a model that derives from VocabularyParallelModel: a layer built
// for ABI 3.0, which did not know the role, is never asked.
enum class TensorParallelRole : std::uint8_t { replicate, column, row, pair, vocabulary };

// The tensor group's sum as a layer split with role pair or vocabulary sees it (the kit
// implements it over the group's communicator: strategy_kit/tensor_parallel.hpp).
class TensorGroupSum {
 public:
  virtual ~TensorGroupSum() = default;
  // Replaces `partial` by its sum over the tensor group, in place; blocks until done. Every
  // rank of the group must call it at the same point of the same layer (a collective), and
  // all get the same bits. Errors: TransportError and Timeout from the group.
  virtual void sum(Tensor& partial) const = 0;
};

// Rank `rank` of a tensor group of `size`. Extents split near-equally, the first ranks one
// larger when `size` does not divide them (the micro-batch rule), so column and row slices of
// the same feature dimension always line up.
struct TensorSlice {
  int rank = 0;
  int size = 1;

  // This rank's [begin, end) of `extent` indices. Throws InvalidArgument when rank is not in
  // [0, size) or extent < size (a rank would hold nothing).
  [[nodiscard]] std::pair<std::size_t, std::size_t> range_of(std::size_t extent) const;
};

// Which update and which rows a training forward computes, for a layer that draws randomness per
// element (dropout, layers/dropout.hpp): a mask drawn from (seed, step, the element's place in the
// global batch) is the same whichever rank, micro-batch or pipeline stage computes that element, so
// every strategy and mesh train on the same masks, and a resumed run draws those of the run it
// continues.
struct TrainingDraw {
  std::uint64_t seed = 0;        // the run's (StrategySetup::seed)
  std::int64_t step = 0;         // StepInfo::step of the update this forward belongs to
  std::size_t first_sample = 0;  // the global batch's row that is row 0 of this call's input
};

// What a layer's forward saves for its backward, for one micro-batch. Owned by the engine, so
// several micro-batches (pipelining, accumulation) can be in flight through one layer object.
class LayerContext {
 public:
  void save(Tensor tensor) { saved_.push_back(std::move(tensor)); }
  [[nodiscard]] const Tensor& saved(std::size_t i) const { return saved_.at(i); }
  void clear() noexcept { saved_.clear(); }

  // False when nothing consumes the input's gradient (the first layer sees only data): backward
  // may then skip that GEMM and return an empty tensor. Survives clear().
  void set_input_gradient_needed(bool needed) noexcept { input_gradient_needed_ = needed; }
  [[nodiscard]] bool input_gradient_needed() const noexcept { return input_gradient_needed_; }

  // The tensor group of a layer split with role pair or vocabulary; nullptr (the default) outside
  // tensor parallelism. Not owned: the kit's plan, which outlives the step. Survives clear().
  void set_tensor_group(const TensorGroupSum* group) noexcept { tensor_group_ = group; }
  // Sums a partial result over the layer's tensor group; nothing without one (a whole layer's
  // result is already the sum), so a layer runs one code path whole and split.
  void sum_over_tensor_group(Tensor& partial) const {
    if (tensor_group_ != nullptr) tensor_group_->sum(partial);
  }

  // Set by the layer runner for a forward that trains (forward_layers with LayerRange::training);
  // unset, the forward evaluates or samples and draws nothing (dropout is off). Backward reads
  // the draw its forward had, to draw the same mask again. Survives clear().
  void set_training(const TrainingDraw& draw) noexcept { training_ = draw; }
  [[nodiscard]] const std::optional<TrainingDraw>& training() const noexcept { return training_; }

 private:
  std::vector<Tensor> saved_;
  bool input_gradient_needed_ = true;
  const TensorGroupSum* tensor_group_ = nullptr;
  std::optional<TrainingDraw> training_;
};

// Layers are stateless apart from their configuration: parameters and gradients arrive as
// views, one per ParamSpec in order, valid for the duration of the call. forward may keep an
// alias() of its input in ctx, so the caller must not write into the input until backward of
// that context has returned. Layers never communicate: the tensor-parallel sums around
// column/row-parallel layers belong to the strategy kit (strategy_kit/tensor_parallel.hpp), and a
// layer split with role pair or vocabulary calls the sum the kit hands it in its context.
// Thread-safety: forward/backward are const and may run concurrently with different contexts.
class Layer {
 public:
  virtual ~Layer() = default;
  [[nodiscard]] virtual std::string name() const = 0;
  [[nodiscard]] virtual std::vector<ParamSpec> parameters() const = 0;
  [[nodiscard]] virtual Shape output_shape(const Shape& input) const = 0;

  virtual Tensor forward(const Tensor& input, std::span<const BufferView> params,
                         LayerContext& ctx) const = 0;
  // Adds (+=) the parameter gradients into grads and returns the gradient of the input.
  virtual Tensor backward(const Tensor& grad_output, std::span<const BufferView> params,
                          std::span<const BufferView> grads, LayerContext& ctx) const = 0;

  // This layer as tensor rank `slice.rank` of `slice.size` holds it in `role` (column, row, pair
  // or vocabulary): a new layer whose parameters() describe its slices (ParamSpec::slice) and which
  // computes on them. nullptr: the layer cannot be split that way and runs whole on every
  // tensor rank (replicate). A row-parallel layer's output is a partial sum that the kit
  // all-reduces in place, so it must not keep its output in its context. The new layer may share
  // resources with this one (compute threads) but not its lifetime. Throws InvalidArgument for role
  // replicate, a rank outside [0, size), or an extent smaller than the tensor size.
  [[nodiscard]] std::unique_ptr<Layer> sliced(TensorParallelRole role, TensorSlice slice) const;

 protected:
  // The layer's own split, after sliced() has checked its arguments. The default: cannot.
  [[nodiscard]] virtual std::unique_ptr<Layer> do_sliced(TensorParallelRole role,
                                                         TensorSlice slice) const;
};

}  // namespace tessera
