#include "layers/activation.hpp"

#include <string>

#include "layers/gelu.hpp"
#include "layers/layer_checks.hpp"
#include "tessera/base/error.hpp"

namespace tessera::layers {
namespace {

// dy is loaded unconditionally: `s > 0 ? dy[i] : 0` would be a conditional load, which the
// compiler may not speculate, leaving a branch per element that mispredicts on half of them.
void relu_backward(const float* __restrict s, const float* __restrict dy, float* __restrict dx,
                   std::size_t n) {
  for (std::size_t i = 0; i < n; ++i) {
    const float g = dy[i];
    dx[i] = s[i] > 0.0F ? g : 0.0F;
  }
}

}  // namespace

ActivationKind parse_activation(std::string_view name) {
  if (name == "relu") return ActivationKind::relu;
  if (name == "gelu") return ActivationKind::gelu;
  throw ConfigError("unknown activation '" + std::string(name) + "' (valid: relu, gelu)");
}

Activation::Activation(std::string name, ActivationKind kind,
                       std::shared_ptr<const ComputeContext> compute)
    : name_(std::move(name)), kind_(kind), compute_(std::move(compute)) {
  TESSERA_CHECK(compute_ != nullptr, name_ + ": needs a compute context");
}

Tensor Activation::forward(const Tensor& input, std::span<const BufferView> params,
                           LayerContext& ctx) const {
  TESSERA_CHECK(params.empty(), name_ + ": takes no parameters");
  TESSERA_CHECK(input.dtype() == DType::f32, name_ + ": expects f32 input");
  if (compute_device(name_, input) != Device::cpu()) {
    Tensor output = device::activation_forward(kind_, input);
    ctx.save(kind_ == ActivationKind::relu ? output.alias() : input.alias());
    return output;
  }
  Tensor output(input.shape(), DType::f32);
  const float* x = input.as<float>().data();
  float* y = output.as<float>().data();
  if (kind_ == ActivationKind::relu) {
    compute_->parallel_for(input.count(), kParallelGrain, [&](std::size_t b, std::size_t e) {
      for (std::size_t i = b; i < e; ++i) y[i] = x[i] > 0.0F ? x[i] : 0.0F;
    });
    ctx.save(output.alias());
  } else {
    compute_->parallel_for(input.count(), kParallelGrain / 8, [&](std::size_t b, std::size_t e) {
      for (std::size_t i = b; i < e; ++i) y[i] = gelu(x[i]);
    });
    ctx.save(input.alias());
  }
  return output;
}

Tensor Activation::backward(const Tensor& grad_output, std::span<const BufferView> params,
                            std::span<const BufferView> grads, LayerContext& ctx) const {
  TESSERA_CHECK(params.empty() && grads.empty(), name_ + ": takes no parameters");
  const Tensor& saved = ctx.saved(0);
  TESSERA_CHECK(grad_output.dtype() == DType::f32 && grad_output.count() == saved.count(),
                name_ + ": gradient does not match the forward input");
  const Device device = compute_device(name_, saved);
  check_same_device(name_, "the output gradient", grad_output, device);
  if (!ctx.input_gradient_needed()) return {};
  if (device != Device::cpu()) return device::activation_backward(kind_, saved, grad_output);
  Tensor grad_input(saved.shape(), DType::f32);
  const float* dy = grad_output.as<float>().data();
  const float* s = saved.as<float>().data();
  float* dx = grad_input.as<float>().data();
  if (kind_ == ActivationKind::relu) {
    compute_->parallel_for(saved.count(), kParallelGrain, [&](std::size_t b, std::size_t e) {
      relu_backward(s + b, dy + b, dx + b, e - b);
    });
  } else {
    compute_->parallel_for(saved.count(), kParallelGrain / 8, [&](std::size_t b, std::size_t e) {
      for (std::size_t i = b; i < e; ++i) dx[i] = dy[i] * gelu_derivative(s[i]);
    });
  }
  return grad_input;
}

}  // namespace tessera::layers
