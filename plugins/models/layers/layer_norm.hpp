#pragma once
// Layer normalisation over the last dimension (PyTorch's nn.LayerNorm(channels), eps 1e-5),
// forward and backward as plain functions over spans (the reference kernels of the transformer
// layers, llm.c's train_gpt2.c style).
//
// Layouts (row-major):
//   input, output, grad_output, grad_input : [rows, channels]   rows = batch * time
//   weight, bias, grad_weight, grad_bias   : [channels]
//   mean, rstd                             : [rows]  (saved by forward for backward)
//
// Every backward ADDS (+=) into its gradients, input and parameter alike: a residual stream
// collects the gradients of its branches without a copy, and the caller zeroes them once.
// Real is float or double (double for the finite-difference tests). The results have the same
// bits at any thread count: each thread writes its own rows or its own channels, and sums over
// rows always run in row order.

#include <cstddef>
#include <span>

#include "layers/compute_context.hpp"
#include "tessera/base/tensor.hpp"

namespace tessera::layers {

inline constexpr double kLayerNormEps = 1e-5;

// output = (input - mean) * rstd * weight + bias, with the biased variance over channels and
// rstd = 1 / sqrt(variance + eps). Writes output, mean and rstd.
template <class Real>
void layer_norm_forward(std::span<Real> output, std::span<Real> mean, std::span<Real> rstd,
                        std::span<const Real> input, std::span<const Real> weight,
                        std::span<const Real> bias, std::size_t rows, std::size_t channels,
                        const ComputeContext& compute);

// With xhat = (input - mean) * rstd and g = grad_output * weight:
//   grad_input  += rstd * (g - mean_c(g) - xhat * mean_c(g * xhat))
//   grad_weight += sum over rows of grad_output * xhat;  grad_bias += sum over rows of grad_output
template <class Real>
void layer_norm_backward(std::span<Real> grad_input, std::span<Real> grad_weight,
                         std::span<Real> grad_bias, std::span<const Real> grad_output,
                         std::span<const Real> input, std::span<const Real> weight,
                         std::span<const Real> mean, std::span<const Real> rstd, std::size_t rows,
                         std::size_t channels, const ComputeContext& compute);

// The same kernels over Tensors, on the host or on a CUDA device (device_compute.hpp): the
// device is the input's, and the weight, bias and gradient views must be there too. Every size
// and device is checked (InvalidArgument naming layer_norm and the argument) before anything is
// read. Forward returns the output (the input's shape; rows = input.count() / channels) and the
// per-row statistics, on the input's device.
struct LayerNormOutput {
  Tensor output;
  Tensor mean;
  Tensor rstd;
};
[[nodiscard]] LayerNormOutput layer_norm_forward(const Tensor& input, const BufferView& weight,
                                                 const BufferView& bias, std::size_t channels,
                                                 const ComputeContext& compute);
// Adds into grad_input (the input's shape), grad_weight and grad_bias. On a GPU the parameter
// gradients sum the rows in fixed chunks, the chunks in order: the same bits from run to run,
// not the host's.
void layer_norm_backward(const Tensor& grad_input, const BufferView& grad_weight,
                         const BufferView& grad_bias, const Tensor& grad_output,
                         const Tensor& input, const BufferView& weight, const Tensor& mean,
                         const Tensor& rstd, std::size_t channels, const ComputeContext& compute);

}  // namespace tessera::layers
