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
// Dropout on the attention probabilities (GPT-2's attn_pdrop, nanoGPT's attn_dropout) happens
// inside these loops, after the softmax as in PyTorch: O_i = sum_j p_ij m_ij V_j, where p_ij is
// the undropped softmax (its normaliser, and the saved log-sum-exp, are those without dropout)
// and m_ij is 0 or 1 / (1 - rate). The mask is never stored: each row's m_i0 .. m_ii is drawn
// from its counters (dropout.hpp) in forward and again in backward, so dropout adds one draw per
// pair j <= i to each pass and a T-long row of scratch per thread, nothing saved. Backward with
// the mask: dV_j += p_ij m_ij dO_i; dP_ij = m_ij (dO_i . V_j); dS_ij = p_ij (dP_ij - D_i), where
// the row term D_i = sum_j p_ij dP_ij = dO_i . O_i still, since O_i is the dropped output.
//
// Backward ADDS (+=) into grad_qkv (see layer_norm.hpp). Real is float or double. Parallel over
// batch * heads: each (b, h) pair writes only its own columns of its own batch row and sums in a
// fixed order, so the results have the same bits at any thread count.

#include <cstddef>
#include <span>

#include "layers/compute_context.hpp"
#include "layers/dropout.hpp"

namespace tessera::layers {

struct AttentionShape {
  std::size_t batch = 0;
  std::size_t time = 0;
  std::size_t heads = 0;
  std::size_t head_size = 0;
  [[nodiscard]] std::size_t channels() const noexcept { return heads * head_size; }
};

// Which probabilities dropout zeroes. Mask element m_ij of the call's batch row b and head h is
// dropout_keeps(key, rate, ((b * total_heads + h) * time + i) * time + j): key.first is where the
// call's (row 0, head 0, i = 0, j = 0) lies in the site's [n, total_heads, time, time]
// probabilities over the global batch, ((first sample) * total_heads + first head) * time^2,
// so a call over a micro-batch, a pipeline stage's rows or a tensor rank's heads (which keep
// their global head numbers) draws the bits one call over the whole batch and every head draws.
struct AttentionDropout {
  float rate = 0.0F;  // in [0, 1); 0 draws nothing, and the results have the bits of no dropout
  DropoutKey key{};
  std::size_t total_heads = 0;  // the layer's heads, >= shape.heads (0: shape.heads)
};

// Writes output and log_sum_exp.
template <class Real>
void causal_attention_forward(std::span<Real> output, std::span<Real> log_sum_exp,
                              std::span<const Real> qkv, const AttentionShape& shape,
                              const ComputeContext& compute, const AttentionDropout& dropout = {});

// Needs forward's output and log_sum_exp beside qkv, and the dropout forward had. With
// D_i = dO_i . O_i, the recomputed p_ij and the mask drawn again (m_ij = 1 without dropout):
// dV_j += p_ij m_ij dO_i;  dS_ij = p_ij (m_ij dO_i . V_j - D_i);  dQ_i += scale dS_ij K_j;
// dK_j += scale dS_ij Q_i.
template <class Real>
void causal_attention_backward(std::span<Real> grad_qkv, std::span<const Real> grad_output,
                               std::span<const Real> qkv, std::span<const Real> output,
                               std::span<const Real> log_sum_exp, const AttentionShape& shape,
                               const ComputeContext& compute, const AttentionDropout& dropout = {});

}  // namespace tessera::layers
