#include "layers/gelu.hpp"

#include <type_traits>

#include "layers/kernel_support.hpp"
#include "layers/layer_checks.hpp"

namespace tessera::layers {
namespace {

// 1 + tanh(u) and 1 - tanh(u)^2, what gelu and gelu' need. For float they come from
// e = e^(-2|u|) (kernel_support.hpp's vectorised exp) as 2/(1 + e) or 2e/(1 + e) and
// 4e/(1 + e)^2: no tanhf call (which cost more than the GEMMs around the MLP at GPT-2's width)
// and no cancellation where tanh is near +-1. Double keeps std::tanh.
template <class Real>
struct TanhTerms {
  Real one_plus;
  Real one_minus_square;
};

// Always inlined: a call per element would keep the loops around it scalar.
template <class Real>
[[gnu::always_inline]] inline TanhTerms<Real> tanh_terms(Real u) {
  if constexpr (std::is_same_v<Real, float>) {
    const float e = exp_nonpositive(-2.0F * std::fabs(u));
    const float d = 1.0F / (1.0F + e);
    return {(u >= 0.0F ? 2.0F : 2.0F * e) * d, 4.0F * e * d * d};
  } else {
    const Real t = std::tanh(u);
    return {Real(1) + t, Real(1) - t * t};
  }
}

template <class Real>
[[gnu::always_inline]] inline Real gelu_tanh_inner(Real x) {
  return static_cast<Real>(kGeluSqrt2OverPi) * (x + static_cast<Real>(kGeluCubic) * x * x * x);
}

}  // namespace

template <class Real>
void gelu_forward(std::span<Real> output, std::span<const Real> input,
                  const ComputeContext& compute) {
  require_size("gelu", "output", output, input.size());
  compute.parallel_for(input.size(), kParallelGrain / 8,
                       [&](std::size_t b, std::size_t e) TESSERA_KERNEL_INLINE {
                         for (std::size_t i = b; i < e; ++i) {
                           const Real x = input[i];
                           output[i] = Real(0.5) * x * tanh_terms(gelu_tanh_inner(x)).one_plus;
                         }
                       });
}

template <class Real>
void gelu_backward(std::span<Real> grad_input, std::span<const Real> grad_output,
                   std::span<const Real> input, const ComputeContext& compute) {
  require_size("gelu", "grad_input", grad_input, input.size());
  require_size("gelu", "grad_output", grad_output, input.size());
  compute.parallel_for(
      input.size(), kParallelGrain / 8, [&](std::size_t b, std::size_t e) TESSERA_KERNEL_INLINE {
        for (std::size_t i = b; i < e; ++i) {
          const Real x = input[i];
          const TanhTerms<Real> t = tanh_terms(gelu_tanh_inner(x));
          const Real inner_slope = static_cast<Real>(kGeluSqrt2OverPi) *
                                   (Real(1) + Real(3) * static_cast<Real>(kGeluCubic) * x * x);
          const Real slope =
              Real(0.5) * t.one_plus + Real(0.5) * x * t.one_minus_square * inner_slope;
          grad_input[i] += slope * grad_output[i];
        }
      });
}

template void gelu_forward<float>(std::span<float>, std::span<const float>, const ComputeContext&);
template void gelu_forward<double>(std::span<double>, std::span<const double>,
                                   const ComputeContext&);
template void gelu_backward<float>(std::span<float>, std::span<const float>, std::span<const float>,
                                   const ComputeContext&);
template void gelu_backward<double>(std::span<double>, std::span<const double>,
                                    std::span<const double>, const ComputeContext&);

Tensor gelu_forward(const Tensor& input, const ComputeContext& compute) {
  const Device device = compute_device("gelu", input);
  check_floats("gelu", "input", input.view(), input.count(), device);
  if (device != Device::cpu()) return device::activation_forward(ActivationKind::gelu, input);
  Tensor output(input.shape(), DType::f32);
  gelu_forward<float>(output.as<float>(), input.as<float>(), compute);
  return output;
}

void gelu_backward(const Tensor& grad_input, const Tensor& grad_output, const Tensor& input,
                   const ComputeContext& compute) {
  const Device device = compute_device("gelu", input);
  check_floats("gelu", "input", input.view(), input.count(), device);
  check_floats("gelu", "grad_input", grad_input.view(), input.count(), device);
  check_floats("gelu", "grad_output", grad_output.view(), input.count(), device);
  if (device != Device::cpu()) {
    device::gelu_backward(grad_input, grad_output, input);
    return;
  }
  gelu_backward<float>(grad_input.as<float>(), grad_output.as<float>(), input.as<float>(), compute);
}

}  // namespace tessera::layers
