#include "layers/gelu.hpp"

#include "layers/kernel_support.hpp"

namespace tessera::layers {

template <class Real>
void gelu_forward(std::span<Real> output, std::span<const Real> input,
                  const ComputeContext& compute) {
  require_size("gelu", "output", output, input.size());
  compute.parallel_for(input.size(), kParallelGrain / 8, [&](std::size_t b, std::size_t e) {
    for (std::size_t i = b; i < e; ++i) output[i] = gelu(input[i]);
  });
}

template <class Real>
void gelu_backward(std::span<Real> grad_input, std::span<const Real> grad_output,
                   std::span<const Real> input, const ComputeContext& compute) {
  require_size("gelu", "grad_input", grad_input, input.size());
  require_size("gelu", "grad_output", grad_output, input.size());
  compute.parallel_for(input.size(), kParallelGrain / 8, [&](std::size_t b, std::size_t e) {
    for (std::size_t i = b; i < e; ++i) grad_input[i] += gelu_derivative(input[i]) * grad_output[i];
  });
}

template void gelu_forward<float>(std::span<float>, std::span<const float>, const ComputeContext&);
template void gelu_forward<double>(std::span<double>, std::span<const double>,
                                   const ComputeContext&);
template void gelu_backward<float>(std::span<float>, std::span<const float>, std::span<const float>,
                                   const ComputeContext&);
template void gelu_backward<double>(std::span<double>, std::span<const double>,
                                    std::span<const double>, const ComputeContext&);

}  // namespace tessera::layers
