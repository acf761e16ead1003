#include "layers/causal_attention_tensors.hpp"

#include "layers/layer_checks.hpp"

namespace tessera::layers {
namespace {

constexpr const char* kKernel = "causal_attention";

// The device qkv is on, with the sizes forward and backward share checked there.
Device checked(const Tensor& qkv, const AttentionShape& shape) {
  TESSERA_CHECK(shape.heads > 0 && shape.head_size > 0,
                "causal_attention: heads and head_size must be positive");
  const Device device = compute_device(kKernel, qkv);
  check_floats(kKernel, "qkv", qkv.view(), shape.batch * shape.time * 3 * shape.channels(), device);
  return device;
}

}  // namespace

AttentionOutput causal_attention_forward(const Tensor& qkv, const AttentionShape& shape,
                                         const ComputeContext& compute) {
  const Device device = checked(qkv, shape);
  if (device != Device::cpu()) return device::causal_attention_forward(qkv, shape);
  AttentionOutput result{Tensor({shape.batch, shape.time, shape.channels()}, DType::f32),
                         Tensor({shape.batch, shape.heads, shape.time}, DType::f32)};
  causal_attention_forward<float>(result.output.as<float>(), result.log_sum_exp.as<float>(),
                                  qkv.as<float>(), shape, compute);
  return result;
}

void causal_attention_backward(const Tensor& grad_qkv, const Tensor& grad_output, const Tensor& qkv,
                               const Tensor& output, const Tensor& log_sum_exp,
                               const AttentionShape& shape, const ComputeContext& compute) {
  const Device device = checked(qkv, shape);
  const std::size_t tokens = shape.batch * shape.time;
  check_floats(kKernel, "grad_qkv", grad_qkv.view(), qkv.count(), device);
  check_floats(kKernel, "output", output.view(), tokens * shape.channels(), device);
  check_floats(kKernel, "grad_output", grad_output.view(), tokens * shape.channels(), device);
  check_floats(kKernel, "log_sum_exp", log_sum_exp.view(), tokens * shape.heads, device);
  if (device != Device::cpu()) {
    device::causal_attention_backward(grad_qkv, grad_output, qkv, output, log_sum_exp, shape);
    return;
  }
  causal_attention_backward<float>(grad_qkv.as<float>(), grad_output.as<float>(), qkv.as<float>(),
                                   output.as<float>(), log_sum_exp.as<float>(), shape, compute);
}

}  // namespace tessera::layers
