#pragma once
// Layer: one stage of a model's computation on parameter memory that the strategy owns.

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "tessera/base/tensor.hpp"

namespace tessera {

enum class ParamInit : std::uint8_t { zeros, ones, kaiming_uniform, xavier_uniform };
// How Megatron-style tensor parallelism may split the parameter across a tensor group.
enum class TensorParallelHint : std::uint8_t { replicate, split_rows, split_columns };

struct ParamSpec {
  std::string name;
  Shape shape;
  DType dtype = DType::f32;
  ParamInit init = ParamInit::zeros;
  TensorParallelHint tensor_parallel = TensorParallelHint::replicate;
  // Fan-in used by kaiming/xavier initialisation.
  std::size_t fan_in = 0;
  std::size_t fan_out = 0;
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

 private:
  std::vector<Tensor> saved_;
  bool input_gradient_needed_ = true;
};

// Layers are stateless apart from their configuration: parameters and gradients arrive as
// views, one per ParamSpec in order, valid for the duration of the call. forward may keep an
// alias() of its input in ctx, so the caller must not write into the input until backward of
// that context has returned.
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
};

}  // namespace tessera
