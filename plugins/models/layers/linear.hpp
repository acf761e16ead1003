#pragma once
// y = x W^T + b, W of shape [out, in] (PyTorch's layout), computed with OpenBLAS sgemm.

#include <memory>

#include "layers/compute_context.hpp"
#include "tessera/plugin/layer.hpp"

namespace tessera::layers {

class Linear final : public Layer {
 public:
  // Parameters: "<name>.weight" [out, in] kaiming_uniform, "<name>.bias" [out] zeros.
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

 private:
  std::string name_;
  std::size_t in_;
  std::size_t out_;
  std::shared_ptr<const ComputeContext> compute_;
  std::vector<ParamSpec> specs_;
};

}  // namespace tessera::layers
