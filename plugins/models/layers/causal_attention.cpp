#include "layers/causal_attention.hpp"

#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include "layers/kernel_support.hpp"

namespace tessera::layers {
namespace {

// Eight partial sums, combined in a fixed order: the compiler keeps them in vector registers
// (one running sum would keep the loop scalar, since float addition may not be reordered), and
// the result does not depend on threads or on where a head's vectors lie.
constexpr std::size_t kDotLanes = 8;

template <class Real>
[[gnu::always_inline]] inline Real dot(const Real* a, const Real* b, std::size_t n) {
  Real lanes[kDotLanes] = {};
  const std::size_t whole = n - n % kDotLanes;
  for (std::size_t d = 0; d < whole; d += kDotLanes) {
    for (std::size_t k = 0; k < kDotLanes; ++k) lanes[k] += a[d + k] * b[d + k];
  }
  for (std::size_t d = whole; d < n; ++d) lanes[d - whole] += a[d] * b[d];
  Real sum = 0;
  for (const Real lane : lanes) sum += lane;
  return sum;
}

// Where one (batch, head) pair's vectors lie: Q, K and V of token t start at
// q(t), k(t), v(t), each head_size long; its output at out(t). Strides are in elements.
struct HeadView {
  std::size_t qkv_row = 0;    // 3 * channels: one token's [Q; K; V]
  std::size_t out_row = 0;    // channels
  std::size_t qkv_start = 0;  // (b * time) * qkv_row + h * head_size
  std::size_t out_start = 0;  // (b * time) * out_row + h * head_size
  std::size_t channels = 0;

  HeadView(const AttentionShape& shape, std::size_t pair)
      : qkv_row(3 * shape.channels()), out_row(shape.channels()), channels(shape.channels()) {
    const std::size_t b = pair / shape.heads;
    const std::size_t h = pair % shape.heads;
    qkv_start = b * shape.time * qkv_row + h * shape.head_size;
    out_start = b * shape.time * out_row + h * shape.head_size;
  }
  [[nodiscard]] std::size_t q(std::size_t t) const { return qkv_start + t * qkv_row; }
  [[nodiscard]] std::size_t k(std::size_t t) const { return q(t) + channels; }
  [[nodiscard]] std::size_t v(std::size_t t) const { return q(t) + 2 * channels; }
  [[nodiscard]] std::size_t out(std::size_t t) const { return out_start + t * out_row; }
};

// Checks the shape and the sizes of the spans forward and backward share; returns the
// score scale 1 / sqrt(head_size).
template <class Real>
Real checked_scale(const AttentionShape& shape, std::span<const Real> qkv,
                   std::span<const Real> output, std::span<const Real> log_sum_exp) {
  TESSERA_CHECK(shape.heads > 0 && shape.head_size > 0,
                "causal_attention: heads and head_size must be positive");
  const std::size_t tokens = shape.batch * shape.time;
  require_size("causal_attention", "qkv", qkv, tokens * 3 * shape.channels());
  require_size("causal_attention", "output", output, tokens * shape.channels());
  require_size("causal_attention", "log_sum_exp", log_sum_exp, tokens * shape.heads);
  return Real(1) / std::sqrt(static_cast<Real>(shape.head_size));
}

}  // namespace

template <class Real>
void causal_attention_forward(std::span<Real> output, std::span<Real> log_sum_exp,
                              std::span<const Real> qkv, const AttentionShape& shape,
                              const ComputeContext& compute) {
  const Real scale = checked_scale<Real>(shape, qkv, output, log_sum_exp);
  const std::size_t hs = shape.head_size;
  const std::size_t pair_cost = shape.time * shape.time * hs * 2;
  compute.parallel_for(
      shape.batch * shape.heads, grain_for(pair_cost), [&](std::size_t p0, std::size_t p1) {
        std::vector<Real> acc(hs);
        for (std::size_t pair = p0; pair < p1; ++pair) {
          const HeadView at(shape, pair);
          Real* lse = log_sum_exp.data() + pair * shape.time;
          for (std::size_t i = 0; i < shape.time; ++i) {
            const Real* q = qkv.data() + at.q(i);
            // Online softmax: `running_max` is the largest score so far, `sum` the sum of
            // exp(score - running_max), `acc` the sum of exp(score - running_max) * v. A larger
            // score rescales both by exp(old max - new max). The first score sets the maximum.
            Real running_max = -std::numeric_limits<Real>::infinity();
            Real sum = 0;
            std::fill(acc.begin(), acc.end(), Real(0));
            for (std::size_t j = 0; j <= i; ++j) {
              const Real score = scale * dot(q, qkv.data() + at.k(j), hs);
              if (score > running_max) {
                const Real shrink = std::exp(running_max - score);  // 0 on the first score
                sum *= shrink;
                for (Real& a : acc) a *= shrink;
                running_max = score;
              }
              const Real weight = std::exp(score - running_max);
              sum += weight;
              const Real* v = qkv.data() + at.v(j);
              for (std::size_t d = 0; d < hs; ++d) acc[d] += weight * v[d];
            }
            Real* out = output.data() + at.out(i);
            for (std::size_t d = 0; d < hs; ++d) out[d] = acc[d] / sum;
            lse[i] = running_max + std::log(sum);
          }
        }
      });
}

template <class Real>
void causal_attention_backward(std::span<Real> grad_qkv, std::span<const Real> grad_output,
                               std::span<const Real> qkv, std::span<const Real> output,
                               std::span<const Real> log_sum_exp, const AttentionShape& shape,
                               const ComputeContext& compute) {
  const Real scale = checked_scale<Real>(shape, qkv, output, log_sum_exp);
  require_size("causal_attention", "grad_qkv", grad_qkv, qkv.size());
  require_size("causal_attention", "grad_output", grad_output, output.size());
  const std::size_t hs = shape.head_size;
  const std::size_t pair_cost = shape.time * shape.time * hs * 5;
  compute.parallel_for(
      shape.batch * shape.heads, grain_for(pair_cost), [&](std::size_t p0, std::size_t p1) {
        for (std::size_t pair = p0; pair < p1; ++pair) {
          const HeadView at(shape, pair);
          const Real* lse = log_sum_exp.data() + pair * shape.time;
          for (std::size_t i = 0; i < shape.time; ++i) {
            const Real* q = qkv.data() + at.q(i);
            const Real* dout = grad_output.data() + at.out(i);
            // D_i = sum_j p_ij (dO_i . V_j) = dO_i . O_i: the softmax Jacobian's row term, from the
            // saved output instead of the probabilities.
            const Real row_term = dot(dout, output.data() + at.out(i), hs);
            Real* dq = grad_qkv.data() + at.q(i);
            for (std::size_t j = 0; j <= i; ++j) {
              const Real* k = qkv.data() + at.k(j);
              const Real* v = qkv.data() + at.v(j);
              const Real p = std::exp(scale * dot(q, k, hs) - lse[i]);  // recomputed
              const Real ds = p * (dot(dout, v, hs) - row_term) * scale;
              Real* dk = grad_qkv.data() + at.k(j);
              Real* dv = grad_qkv.data() + at.v(j);
              // Three loops, not one: each vectorises on its own (dV, dQ and dK are disjoint).
              for (std::size_t d = 0; d < hs; ++d) dv[d] += p * dout[d];
              for (std::size_t d = 0; d < hs; ++d) dq[d] += ds * k[d];
              for (std::size_t d = 0; d < hs; ++d) dk[d] += ds * q[d];
            }
          }
        }
      });
}

template void causal_attention_forward<float>(std::span<float>, std::span<float>,
                                              std::span<const float>, const AttentionShape&,
                                              const ComputeContext&);
template void causal_attention_forward<double>(std::span<double>, std::span<double>,
                                               std::span<const double>, const AttentionShape&,
                                               const ComputeContext&);
template void causal_attention_backward<float>(std::span<float>, std::span<const float>,
                                               std::span<const float>, std::span<const float>,
                                               std::span<const float>, const AttentionShape&,
                                               const ComputeContext&);
template void causal_attention_backward<double>(std::span<double>, std::span<const double>,
                                                std::span<const double>, std::span<const double>,
                                                std::span<const double>, const AttentionShape&,
                                                const ComputeContext&);

}  // namespace tessera::layers
