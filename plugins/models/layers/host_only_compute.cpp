// device_compute.hpp where tessera is built without CUDA: the layers compute on the host only,
// and require_computes_on refuses every device before any of the others could be reached.
#include "layers/device_compute.hpp"
#include "tessera/base/error.hpp"

namespace tessera::layers::device {
namespace {

[[noreturn]] void no_device(Device device) {
  throw InvalidArgument(
      "this build of tessera has no CUDA support, so the reference layers "
      "cannot compute on " +
      to_string(device));
}

}  // namespace

void require_computes_on(Device device, const std::string& layer) {
  throw InvalidArgument(layer + ": cannot compute on " + to_string(device) +
                        "; this build of tessera has no CUDA support, keep the tensors on the "
                        "host");
}

void require_memory(const BufferView& view, const std::string& /*what*/) {
  no_device(view.device);
}

Tensor linear_forward(const Tensor& x, const float* /*w*/, const float* /*b*/, std::size_t /*in*/,
                      std::size_t /*out*/, bool /*add_bias*/) {
  no_device(x.device());
}

void linear_backward_params(const Tensor& x, const Tensor& /*dy*/, float* /*dw*/, float* /*db*/,
                            std::size_t /*in*/, std::size_t /*out*/) {
  no_device(x.device());
}

Tensor linear_backward_input(const Tensor& dy, const float* /*w*/, std::size_t /*in*/,
                             std::size_t /*out*/) {
  no_device(dy.device());
}

Tensor activation_forward(ActivationKind /*kind*/, const Tensor& x) {
  no_device(x.device());
}

Tensor activation_backward(ActivationKind /*kind*/, const Tensor& saved, const Tensor& /*dy*/) {
  no_device(saved.device());
}

LossResult softmax_cross_entropy(const Tensor& logits, const Tensor& /*targets*/,
                                 std::size_t /*classes*/) {
  no_device(logits.device());
}

Tensor embedding_forward(const Tensor& /*tokens*/, std::span<const std::int64_t> /*host_tokens*/,
                         const float* /*token_table*/, const float* /*position_table*/,
                         const EmbeddingShape& /*shape*/, Device device) {
  no_device(device);
}

void embedding_backward(float* /*grad_token_table*/, float* /*grad_position_table*/,
                        const Tensor& grad_output, std::span<const std::int64_t> /*host_tokens*/,
                        const EmbeddingShape& /*shape*/) {
  no_device(grad_output.device());
}

LayerNormOutput layer_norm_forward(const Tensor& input, const float* /*weight*/,
                                   const float* /*bias*/, std::size_t /*rows*/,
                                   std::size_t /*channels*/) {
  no_device(input.device());
}

void layer_norm_backward(const Tensor& /*grad_input*/, float* /*grad_weight*/, float* /*grad_bias*/,
                         const Tensor& /*grad_output*/, const Tensor& input,
                         const float* /*weight*/, const Tensor& /*mean*/, const Tensor& /*rstd*/,
                         std::size_t /*rows*/, std::size_t /*channels*/) {
  no_device(input.device());
}

void gelu_backward(const Tensor& /*grad_input*/, const Tensor& /*grad_output*/,
                   const Tensor& input) {
  no_device(input.device());
}

AttentionOutput causal_attention_forward(const Tensor& qkv, const AttentionShape& /*shape*/) {
  no_device(qkv.device());
}

void causal_attention_backward(const Tensor& /*grad_qkv*/, const Tensor& /*grad_output*/,
                               const Tensor& qkv, const Tensor& /*output*/,
                               const Tensor& /*log_sum_exp*/, const AttentionShape& /*shape*/) {
  no_device(qkv.device());
}

void add_into(const Tensor& target, const Tensor& /*addend*/) {
  no_device(target.device());
}

void dropout_forward(const Tensor& /*output*/, const Tensor& input, float /*p*/,
                     const DropoutKey& /*key*/) {
  no_device(input.device());
}

void dropout_backward(const Tensor& /*grad_input*/, const Tensor& grad_output, float /*p*/,
                      const DropoutKey& /*key*/) {
  no_device(grad_output.device());
}

}  // namespace tessera::layers::device
