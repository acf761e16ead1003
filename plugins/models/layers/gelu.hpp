#pragma once
// GELU, tanh approximation (PyTorch's GELU(approximate="tanh"), GPT-2's):
//   gelu(x) = x/2 * (1 + tanh(sqrt(2/pi) * (x + 0.044715 x^3)))
// as scalar functions (the Activation layer's element-wise kernel) and as span kernels for the
// transformer layers (llm.c style, forward and backward side by side).
//
// Layouts: input, output, grad_output, grad_input: any n elements, element-wise.
// Backward ADDS (+=) into grad_input (the convention of every transformer span kernel, see
// layer_norm.hpp). Real is float or double. Element-wise, so the same bits at any thread count.

#include <cmath>
#include <cstddef>
#include <span>

#include "layers/compute_context.hpp"
#include "tessera/base/tensor.hpp"

namespace tessera::layers {

inline constexpr double kGeluSqrt2OverPi = 0.7978845608028654;
inline constexpr double kGeluCubic = 0.044715;

template <class Real>
Real gelu(Real x) {
  const Real t = std::tanh(static_cast<Real>(kGeluSqrt2OverPi) *
                           (x + static_cast<Real>(kGeluCubic) * x * x * x));
  return Real(0.5) * x * (Real(1) + t);
}

template <class Real>
Real gelu_derivative(Real x) {
  const Real t = std::tanh(static_cast<Real>(kGeluSqrt2OverPi) *
                           (x + static_cast<Real>(kGeluCubic) * x * x * x));
  const Real inner = static_cast<Real>(kGeluSqrt2OverPi) *
                     (Real(1) + Real(3) * static_cast<Real>(kGeluCubic) * x * x);
  return Real(0.5) * (Real(1) + t) + Real(0.5) * x * (Real(1) - t * t) * inner;
}

// output[i] = gelu(input[i]).
template <class Real>
void gelu_forward(std::span<Real> output, std::span<const Real> input,
                  const ComputeContext& compute);

// grad_input[i] += gelu'(input[i]) * grad_output[i].
template <class Real>
void gelu_backward(std::span<Real> grad_input, std::span<const Real> grad_output,
                   std::span<const Real> input, const ComputeContext& compute);

// The span kernels over f32 Tensors of any shape, on the host or on a CUDA device (the input's;
// device_compute.hpp). Forward returns the output on the input's device; backward adds into
// grad_input. Throws InvalidArgument for mismatched sizes or devices.
[[nodiscard]] Tensor gelu_forward(const Tensor& input, const ComputeContext& compute);
void gelu_backward(const Tensor& grad_input, const Tensor& grad_output, const Tensor& input,
                   const ComputeContext& compute);

}  // namespace tessera::layers
