#pragma once
// y = x W^T + b, W of shape [out, in] (PyTorch's layout), computed with OpenBLAS sgemm.
// Splits for tensor parallelism either way (Layer::sliced): column-parallel holds weight rows
// and bias entries [begin, end) of the output features; row-parallel holds weight columns
// [begin, end) of the input features and the whole bias. Uneven splits are supported
// (TensorSlice::range_of); a tensor size above the feature count is refused. An input on a CUDA
// device computes there with cuBLAS (device_compute.hpp); parameters and gradients must be on the
// input's device.

#include <memory>

#include "layers/compute_context.hpp"
#include "tessera/plugin/layer.hpp"

namespace tessera::layers {

class Linear final : public Layer {
 public:
  // Parameters: "<name>.weight" [out, in] kaiming_uniform, weight decay on; "<name>.bias" [out]
  // zeros, weight decay off (ParamSpec::weight_decay).
  Linear(std::string name, std::size_t in_features, std::size_t out_features,
         std::shared_ptr<const ComputeContext> compute);

  [[nodiscard]] std::string name() const override { return name_; }
  [[nodiscard]] std::vector<ParamSpec> parameters() const override;
  [[nodiscard]] Shape output_shape(const Shape& input) const override;

  // input: [n, in] (or any shape of n rows of `in` elements). Saves an alias of the input.
  Tensor forward(const Tensor& input, std::span<const BufferView> params,
                 LayerContext& ctx) const override;
  // weight grad += dy^T x, bias grad += column sums of dy (rows added in order); returns dy W,
  // or an empty tensor when ctx says nobody needs it.
  Tensor backward(const Tensor& grad_output, std::span<const BufferView> params,
                  std::span<const BufferView> grads, LayerContext& ctx) const override;

 protected:
  // Row-parallel: tensor rank 0 alone adds the bias into its partial output, so the group's
  // sum adds it exactly once and the layer needs no step after the all-reduce (adding it after
  // the sum would make the kit's all-reduce know the layer's parameters). Every rank still adds
  // the bias gradient, the column sums of the whole output gradient that every rank holds: the
  // replicated bias gets its exact gradient, the same bits on every tensor rank, and stays equal
  // there without a tensor-group reduction.
  [[nodiscard]] std::unique_ptr<Layer> do_sliced(TensorParallelRole role,
                                                 TensorSlice slice) const override;

 private:
  Linear(const Linear& whole, TensorParallelRole role, TensorSlice slice);

  std::string name_;
  std::size_t in_;  // features this layer computes with (its slice's)
  std::size_t out_;
  std::shared_ptr<const ComputeContext> compute_;
  std::vector<ParamSpec> specs_;
  bool sliced_ = false;
  bool adds_bias_ = true;  // false on row-parallel tensor ranks other than 0
};

}  // namespace tessera::layers
