#pragma once
// Causal multi-head self-attention (GPT-2's, scaled dot products, softmax over the positions
// j <= i), forward and backward side by side over spans. The projections around it (QKV and
// output) are Linear layers (linear.hpp); this is the part between them.
//
// Layouts (row-major; channels = heads * head_size):
//   qkv, grad_qkv      : [batch, time, 3 * channels]  Q, K, V of a token one after the other
//                        ([Q; K; V] as GPT-2's c_attn produces them); head h reads columns
//                        [h * head_size, (h + 1) * head_size) of each of Q, K and V
//   output, grad_output: [batch, time, channels]      head h writes the same columns as it reads
//   log_sum_exp        : [batch, heads, time]         saved by forward for backward:
//                        log sum_{j<=i} exp(q_i . k_j * scale), scale = 1 / sqrt(head_size)
//
// Memory against compute (as FlashAttention): forward computes one query row's scores at a time
// (a T-long scratch per thread: maximum, exponentials, sum, then the weighted values) and keeps
// only the B*H*T log-sum-exps, not the B*H*T*T scores and probabilities that llm.c's attention
// keeps (2 * B*H*T*T floats: 0.4 GB per layer at GPT-2's 12 heads, T = 1024, B = 4, against 0.2 MB
// of log-sum-exps). Backward recomputes each probability p_ij = exp(q_i . k_j * scale - lse_i) from
// Q, K and the saved log-sum-exp. The price is one more T x T x head_size product per head (Q K^T
// again) and its exponentials: forward does two such products (Q K^T, P V), backward four with the
// score recompute five instead of four (dV = P^T dO, dP = dO V^T, dQ = dS K, dK = dS^T Q), so
// forward plus backward costs 7 instead of 6 products, about 17 % more attention FLOPs; the
// linear layers, which dominate at GPT-2's sizes, are unchanged.
//
// A row's scores against keys 0..i are head_size vector updates over the keys, from the head's
// K (and V) transposed once into a [head_size, T] scratch, not i + 1 dot products that each end
// in a horizontal sum (one layer of GPT-2 124M at 1 x 256 tokens, one thread: forward about
// 10 ms instead of 20 to 26; backward, whose dQ, dK, dV updates dominate, about the same).
//
// Backward ADDS (+=) into grad_qkv (see layer_norm.hpp). Real is float or double. Parallel over
// batch * heads: each (b, h) pair writes only its own columns of its own batch row and sums in a
// fixed order, so the results have the same bits at any thread count.

#include <cstddef>
#include <span>

#include "layers/compute_context.hpp"

namespace tessera::layers {

struct AttentionShape {
  std::size_t batch = 0;
  std::size_t time = 0;
  std::size_t heads = 0;
  std::size_t head_size = 0;
  [[nodiscard]] std::size_t channels() const noexcept { return heads * head_size; }
};

// Writes output and log_sum_exp.
template <class Real>
void causal_attention_forward(std::span<Real> output, std::span<Real> log_sum_exp,
                              std::span<const Real> qkv, const AttentionShape& shape,
                              const ComputeContext& compute);

// Needs forward's output and log_sum_exp beside qkv. With D_i = dO_i . O_i and the recomputed
// p_ij:  dV_j += p_ij dO_i;  dS_ij = p_ij (dO_i . V_j - D_i);  dQ_i += scale dS_ij K_j;
// dK_j += scale dS_ij Q_i.
template <class Real>
void causal_attention_backward(std::span<Real> grad_qkv, std::span<const Real> grad_output,
                               std::span<const Real> qkv, std::span<const Real> output,
                               std::span<const Real> log_sum_exp, const AttentionShape& shape,
                               const ComputeContext& compute);

}  // namespace tessera::layers
