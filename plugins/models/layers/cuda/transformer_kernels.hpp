#pragma once
// Launchers of the transformer layers' kernels (embedding, layer norm, causal attention) on the
// current device's legacy default stream, with the layouts and contracts of the host kernels in
// ../embedding.hpp, ../layer_norm.hpp and ../causal_attention.hpp. Plain over raw device
// pointers, as layer_kernels.hpp; each returns the launch's status and does not wait. Every
// output element is written by one thread that sums in a fixed order: no atomics, the same bits
// from run to run. fp32 storage (the kernels are templates on the storage type, computing in
// float, so that a bf16 instantiation can follow).

#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>

namespace tessera::layers::cuda {

// out[i, :] = wte[tokens[i], :] + wpe[i % time, :] for the n_tokens = batch * time tokens, each
// already checked to lie in the vocabulary. The host's bits (one addition per element).
cudaError_t launch_embedding_forward(const std::int64_t* tokens, const float* wte, const float* wpe,
                                     float* out, std::size_t n_tokens, std::size_t time,
                                     std::size_t channels);

// The tokens grouped by vocabulary row (the caller sorts them on the host): segment s adds into
// row segment_rows[s] the output gradients of tokens order[segment_start[s]] ..
// order[segment_start[s + 1] - 1], which lie in increasing order. One thread per (segment,
// channel) adds them in that order onto the row's gradient, and one per (position, channel) adds
// the batch's rows in order onto wpe's: the additions the host makes, in its order, so the
// host's bits.
struct TokenSegments {
  const std::int64_t* rows = nullptr;   // [segments] vocabulary row of each segment
  const std::int64_t* start = nullptr;  // [segments + 1]
  const std::int64_t* order = nullptr;  // [n_tokens] token indices, grouped by segment
  std::size_t segments = 0;
};
cudaError_t launch_embedding_backward(const TokenSegments& segments, const float* grad_output,
                                      float* grad_wte, float* grad_wpe, std::size_t batch,
                                      std::size_t time, std::size_t channels);

// layer_norm.hpp's forward over [rows, channels]: one warp a row, the mean and then the squared
// deviations (two passes, as the host), each summed by lanes and a fixed shuffle tree.
cudaError_t launch_layer_norm_forward(const float* x, const float* weight, const float* bias,
                                      float* y, float* mean, float* rstd, std::size_t rows,
                                      std::size_t channels, float eps);

// Rows a partial sum of the parameter gradients covers: the rows are cut into chunks of this
// many, each chunk summed in row order, the chunks then added in order onto the gradient.
inline constexpr std::size_t kLayerNormRowsPerPartial = 64;
[[nodiscard]] constexpr std::size_t layer_norm_partials(std::size_t rows) {
  return (rows + kLayerNormRowsPerPartial - 1) / kLayerNormRowsPerPartial;
}

// layer_norm.hpp's backward: dx += (one warp a row); grad_weight and grad_bias += the row sums,
// through `partials` (2 * layer_norm_partials(rows) * channels floats of scratch).
cudaError_t launch_layer_norm_backward(const float* dy, const float* x, const float* weight,
                                       const float* mean, const float* rstd, float* dx,
                                       float* grad_weight, float* grad_bias, float* partials,
                                       std::size_t rows, std::size_t channels);

// The largest head size the attention kernels take (their per-thread rows are sized at compile
// time: 32, 64 or 128).
inline constexpr std::size_t kMaxAttentionHeadSize = 128;

struct AttentionDims {
  std::size_t batch = 0;
  std::size_t time = 0;
  std::size_t heads = 0;
  std::size_t head_size = 0;  // at most kMaxAttentionHeadSize
};

// causal_attention.hpp's forward, FlashAttention's way: a block of query rows walks the keys
// tile by tile through shared memory with an online softmax (running maximum and sum, the
// weighted values rescaled as the maximum grows); writes out and log_sum_exp [batch, heads,
// time], nothing of size T x T.
cudaError_t launch_causal_attention_forward(const float* qkv, float* out, float* log_sum_exp,
                                            const AttentionDims& dims);

// causal_attention.hpp's backward, adding into grad_qkv: the probabilities recomputed from Q, K
// and the log-sum-exps; row_terms (batch * heads * time floats of scratch) receives
// D_i = dO_i . O_i. One kernel over query rows writes dQ (each row's sum over its keys in
// order), one over key rows writes dK and dV (each key's sum over its queries in order).
cudaError_t launch_causal_attention_backward(const float* qkv, const float* out,
                                             const float* grad_out, const float* log_sum_exp,
                                             float* row_terms, float* grad_qkv,
                                             const AttentionDims& dims);

}  // namespace tessera::layers::cuda
