#pragma once
// causal_attention.hpp's kernels over Tensors, on the host or on a CUDA device: the device is
// qkv's, and every other tensor must be there too. On the host they run the span kernels; on a
// GPU the FlashAttention-style kernels of cuda/attention_kernels.cu (device_compute.hpp), which
// take head sizes up to 128. Every size and device is checked first (InvalidArgument naming
// causal_attention and the argument).

#include "layers/causal_attention.hpp"
#include "tessera/base/tensor.hpp"

namespace tessera::layers {

// output [batch, time, channels] and log_sum_exp [batch, heads, time] (the layouts of
// causal_attention.hpp), on qkv's device.
struct AttentionOutput {
  Tensor output;
  Tensor log_sum_exp;
};

// qkv: [batch, time, 3 * channels] f32, as causal_attention.hpp lays it out (any shape with that
// many elements).
[[nodiscard]] AttentionOutput causal_attention_forward(const Tensor& qkv,
                                                       const AttentionShape& shape,
                                                       const ComputeContext& compute);

// Adds into grad_qkv (qkv's size), from forward's output and log_sum_exp. On a GPU each element's
// sum runs in a fixed order (keys or queries in increasing order), the same bits from run to run,
// not the host's.
void causal_attention_backward(const Tensor& grad_qkv, const Tensor& grad_output, const Tensor& qkv,
                               const Tensor& output, const Tensor& log_sum_exp,
                               const AttentionShape& shape, const ComputeContext& compute);

}  // namespace tessera::layers
