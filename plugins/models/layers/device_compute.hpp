#pragma once
// The reference layers' computation on a GPU. cuda/device_compute.cpp implements it where
// tessera is built with CUDA (cuBLAS GEMMs and the kernels of cuda/layer_kernels.cu, all on the
// device's legacy default stream), host_only_compute.cpp elsewhere: CMake picks the file once, so
// no layer carries an #if.
//
// Every function runs on the device of its tensors, returns tensors from
// tessera::cuda::allocator_for(that device), and does not wait for the device unless it says so:
// the work is ordered on the default stream, where the allocator, the next layer and the nccl
// transport find it. Results are bitwise the same from run to run (no atomics; every reduction
// adds in a fixed order), though not bitwise the host's (cuBLAS sums a dot product in another
// order than OpenBLAS; CUDA's tanhf is not glibc's).

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>

#include "layers/activation.hpp"
#include "layers/causal_attention_tensors.hpp"
#include "layers/dropout.hpp"
#include "layers/embedding.hpp"
#include "layers/layer_norm.hpp"
#include "tessera/plugin/model.hpp"

namespace tessera::layers::device {

// Throws InvalidArgument, naming `layer`, unless this build computes on `device`: a CUDA device
// this process sees.
void require_computes_on(Device device, const std::string& layer);

// Throws InvalidArgument, naming `what`, unless the view's memory really is on its device (a view
// that says cuda:0 over host memory).
void require_memory(const BufferView& view, const std::string& what);

// y = x w^T (+ b when add_bias): x [n, in], w [out, in], b [out]; y is [n, out].
[[nodiscard]] Tensor linear_forward(const Tensor& x, const float* w, const float* b, std::size_t in,
                                    std::size_t out, bool add_bias);

// dw += dy^T x and db += the column sums of dy, adding rows 0..n-1 in order (the host's bits);
// no bias gradient where db is null (a projection without bias, as GPT-2's head).
void linear_backward_params(const Tensor& x, const Tensor& dy, float* dw, float* db, std::size_t in,
                            std::size_t out);

// dx = dy w, [n, in].
[[nodiscard]] Tensor linear_backward_input(const Tensor& dy, const float* w, std::size_t in,
                                           std::size_t out);

// The activation of x, element-wise, and its backward from what forward saved (ReLU: its output,
// GELU: its input; see activation.hpp).
[[nodiscard]] Tensor activation_forward(ActivationKind kind, const Tensor& x);
[[nodiscard]] Tensor activation_backward(ActivationKind kind, const Tensor& saved,
                                         const Tensor& dy);

// softmax_cross_entropy.hpp's contract on device logits [n, classes]: targets (i64, n) on the host
// or on the logits' device; grad_logits on the logits' device; loss and correct on the host, so
// this one waits for the device.
[[nodiscard]] LossResult softmax_cross_entropy(const Tensor& logits, const Tensor& targets,
                                               std::size_t classes);

// The transformer kernels (embedding.hpp, layer_norm.hpp, gelu.hpp, causal_attention.hpp,
// dropout.hpp) on device tensors, for their Tensor forms, which check every size and device
// first: these functions trust them. New tensors come from the input's allocator; the
// backward functions add into their gradients, as the host kernels do.

// `tokens` (i64, on the host or on `device`) and `host_tokens` the same ids on the host, already
// checked to lie in the vocabulary (the kernel indexes the table with them).
[[nodiscard]] Tensor embedding_forward(const Tensor& tokens,
                                       std::span<const std::int64_t> host_tokens,
                                       const float* token_table, const float* position_table,
                                       const EmbeddingShape& shape, Device device);
// Groups the tokens by vocabulary row on the host (a stable sort of their indices), so that each
// row's gradient is one thread's sum in token order: the host's bits.
void embedding_backward(float* grad_token_table, float* grad_position_table,
                        const Tensor& grad_output, std::span<const std::int64_t> host_tokens,
                        const EmbeddingShape& shape);

[[nodiscard]] LayerNormOutput layer_norm_forward(const Tensor& input, const float* weight,
                                                 const float* bias, std::size_t rows,
                                                 std::size_t channels);
void layer_norm_backward(const Tensor& grad_input, float* grad_weight, float* grad_bias,
                         const Tensor& grad_output, const Tensor& input, const float* weight,
                         const Tensor& mean, const Tensor& rstd, std::size_t rows,
                         std::size_t channels);

// grad_input += gelu'(input) * grad_output (the forward is activation_forward's GELU).
void gelu_backward(const Tensor& grad_input, const Tensor& grad_output, const Tensor& input);

// Both throw InvalidArgument for a shape the kernels do not take: a head size above 128, or a
// sequence longer than 65535 blocks of 32 query rows.
[[nodiscard]] AttentionOutput causal_attention_forward(const Tensor& qkv,
                                                       const AttentionShape& shape);
void causal_attention_backward(const Tensor& grad_qkv, const Tensor& grad_output, const Tensor& qkv,
                               const Tensor& output, const Tensor& log_sum_exp,
                               const AttentionShape& shape);

// target += addend, element-wise (a residual stream).
void add_into(const Tensor& target, const Tensor& addend);

// dropout.hpp's forward (output may be input) and backward (adds), the same mask bit for bit.
void dropout_forward(const Tensor& output, const Tensor& input, float p, const DropoutKey& key);
void dropout_backward(const Tensor& grad_input, const Tensor& grad_output, float p,
                      const DropoutKey& key);

}  // namespace tessera::layers::device
