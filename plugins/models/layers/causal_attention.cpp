#include "layers/causal_attention.hpp"

#include <algorithm>
#include <cmath>
#include <limits>
#include <string>
#include <type_traits>
#include <vector>

#include "layers/kernel_support.hpp"

namespace tessera::layers {
namespace {

// The helpers of the kernels' loops are always inlined: the AVX2 copy of a parallel_for body
// (compute_context.hpp, VectorIsa) is AVX2 only in what is inlined into it.

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

// The dropout a call was given, checked, with total_heads filled in.
AttentionDropout checked_dropout(const AttentionDropout& dropout, const AttentionShape& shape) {
  if (dropout.rate == 0.0F) return {};
  check_dropout_rate(dropout.rate);
  AttentionDropout d = dropout;
  if (d.total_heads == 0) d.total_heads = shape.heads;
  TESSERA_CHECK(d.total_heads >= shape.heads,
                "causal_attention: the dropout's total_heads (" + std::to_string(d.total_heads) +
                    ") is below the call's " + std::to_string(shape.heads) + " heads");
  return d;
}

// The attention dropout of one (batch, head) pair: the factors m_i0 .. m_ii of query row i
// (0 or 1 / (1 - rate)), drawn into a row of scratch.
struct PairMask {
  const AttentionDropout* dropout = nullptr;  // nullptr: nothing is dropped
  std::uint64_t first = 0;                    // the pair's (0, 0) counter, after key.first
  std::uint64_t time = 0;

  PairMask(const AttentionDropout& d, const AttentionShape& shape, std::size_t pair)
      : dropout(d.rate == 0.0F ? nullptr : &d), time(shape.time) {
    const std::uint64_t b = pair / shape.heads;
    const std::uint64_t h = pair % shape.heads;
    first = (b * d.total_heads + h) * time * time;
  }
  [[nodiscard]] bool drops() const noexcept { return dropout != nullptr; }
  template <class Real>
  [[gnu::always_inline]] void draw(Real* scales, std::size_t i, std::size_t n) const {
    dropout_scales(std::span<Real>(scales, n), dropout->rate, dropout->key, first + i * time);
  }
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

// e^x for x <= 0 (a softmax's exponent: a score minus the row's maximum or log-sum-exp, which
// rounding may leave a few ulp above 0): the vectorisable float exp, std::exp for double.
template <class Real>
[[gnu::always_inline]] inline Real exp_at_most_zero(Real x) {
  if constexpr (std::is_same_v<Real, float>) {
    return exp_nonpositive(x);
  } else {
    return std::exp(x);
  }
}

// The largest of scale * s[j], j < n, storing the products back into s (lanes as in dot).
template <class Real>
[[gnu::always_inline]] inline Real scaled_row_max(Real* s, std::size_t n, Real scale) {
  for (std::size_t j = 0; j < n; ++j) s[j] *= scale;
  Real lanes[kDotLanes];
  std::fill_n(lanes, kDotLanes, s[0]);
  const std::size_t whole = n - n % kDotLanes;
  for (std::size_t j = 0; j < whole; j += kDotLanes) {
    for (std::size_t k = 0; k < kDotLanes; ++k)
      lanes[k] = lanes[k] < s[j + k] ? s[j + k] : lanes[k];
  }
  Real max = *std::max_element(lanes, lanes + kDotLanes);
  for (std::size_t j = whole; j < n; ++j) max = std::max(max, s[j]);
  return max;
}

// The sum of s[j], j < n, in kDotLanes partial sums combined in a fixed order.
template <class Real>
[[gnu::always_inline]] inline Real lane_sum(const Real* s, std::size_t n) {
  Real lanes[kDotLanes] = {};
  const std::size_t whole = n - n % kDotLanes;
  for (std::size_t j = 0; j < whole; j += kDotLanes) {
    for (std::size_t k = 0; k < kDotLanes; ++k) lanes[k] += s[j + k];
  }
  for (std::size_t j = whole; j < n; ++j) lanes[j - whole] += s[j];
  Real sum = 0;
  for (const Real lane : lanes) sum += lane;
  return sum;
}

// One task's scratch for a head: its K (and V) transposed to [head_size, time], so that a query
// row's scores against keys 0..i are head_size vector updates over j (s[j] += q[d] * K[d][j],
// summed over d in order) instead of i + 1 dot products, each ending in a horizontal sum.
template <class Real>
struct RowScratch {
  std::size_t time = 0;
  std::size_t head_size = 0;
  std::vector<Real> keys, values;  // [head_size, time]
  std::vector<Real> scores, value_scores, acc;
  std::vector<Real> mask;  // a query row's dropout factors

  explicit RowScratch(const AttentionShape& shape)
      : time(shape.time),
        head_size(shape.head_size),
        keys(shape.head_size * shape.time),
        values(shape.head_size * shape.time),
        scores(shape.time),
        value_scores(shape.time),
        acc(shape.head_size),
        mask(shape.time) {}

  [[gnu::always_inline]] void transpose(std::vector<Real>& into, const Real* qkv,
                                        const HeadView& at, std::size_t part) const {
    for (std::size_t t = 0; t < time; ++t) {
      const Real* row = qkv + at.q(t) + part * at.channels;
      for (std::size_t d = 0; d < head_size; ++d) into[d * time + t] = row[d];
    }
  }
  [[gnu::always_inline]] void transpose_keys(const Real* qkv, const HeadView& at) {
    transpose(keys, qkv, at, 1);
  }
  [[gnu::always_inline]] void transpose_values(const Real* qkv, const HeadView& at) {
    transpose(values, qkv, at, 2);
  }

  // out[j] = sum_d x[d] * m[d][j] for j < n, d in order.
  [[gnu::always_inline]] void products(Real* out, const std::vector<Real>& m, const Real* x,
                                       std::size_t n) const {
    std::fill(out, out + n, Real(0));
    for (std::size_t d = 0; d < head_size; ++d) {
      const Real xd = x[d];
      const Real* column = m.data() + d * time;
      for (std::size_t j = 0; j < n; ++j) out[j] += xd * column[j];
    }
  }
  // scores[j] = q . K_j and value_scores[j] = dO . V_j, j < n (unscaled).
  [[gnu::always_inline]] void scores_against(const Real* q, std::size_t n) {
    products(scores.data(), keys, q, n);
  }
  [[gnu::always_inline]] void value_scores_against(const Real* dout, std::size_t n) {
    products(value_scores.data(), values, dout, n);
  }
};

// One (batch, head) pair's forward: each query row's softmax exactly (its scores, their
// maximum, the exponentials, their sum), then the weighted values, dropped after the sum.
template <class Real>
[[gnu::always_inline]] inline void attend_forward(RowScratch<Real>& row, const HeadView& at,
                                                  const PairMask& mask, const Real* qkv, Real scale,
                                                  Real* output, Real* lse) {
  const std::size_t hs = row.head_size;
  row.transpose_keys(qkv, at);
  Real* weights = row.scores.data();
  for (std::size_t i = 0; i < row.time; ++i) {
    const std::size_t n = i + 1;
    row.scores_against(qkv + at.q(i), n);
    const Real max = scaled_row_max(weights, n, scale);
    for (std::size_t j = 0; j < n; ++j) weights[j] = exp_at_most_zero(weights[j] - max);
    const Real sum = lane_sum(weights, n);
    if (mask.drops()) {
      mask.draw(row.mask.data(), i, n);
      for (std::size_t j = 0; j < n; ++j) weights[j] *= row.mask[j];
    }
    std::fill(row.acc.begin(), row.acc.end(), Real(0));
    for (std::size_t j = 0; j < n; ++j) {
      const Real* v = qkv + at.v(j);
      for (std::size_t d = 0; d < hs; ++d) row.acc[d] += weights[j] * v[d];
    }
    Real* out = output + at.out(i);
    for (std::size_t d = 0; d < hs; ++d) out[d] = row.acc[d] / sum;
    lse[i] = max + std::log(sum);
  }
}

// One pair's backward, adding into grad_qkv.
template <class Real>
[[gnu::always_inline]] inline void attend_backward(RowScratch<Real>& row, const HeadView& at,
                                                   const PairMask& mask, const Real* qkv,
                                                   const Real* output, const Real* grad_output,
                                                   const Real* lse, Real scale, Real* grad_qkv) {
  const std::size_t hs = row.head_size;
  row.transpose_keys(qkv, at);
  row.transpose_values(qkv, at);
  Real* p = row.scores.data();
  Real* ds = row.value_scores.data();
  for (std::size_t i = 0; i < row.time; ++i) {
    const std::size_t n = i + 1;
    const Real* q = qkv + at.q(i);
    const Real* dout = grad_output + at.out(i);
    // D_i = sum_j p_ij m_ij (dO_i . V_j) = dO_i . O_i: the softmax Jacobian's row term, from
    // the saved (dropped) output instead of the probabilities and the mask.
    const Real row_term = dot(dout, output + at.out(i), hs);
    // p_ij recomputed from the scores; then dS_ij times the scale where dO_i . V_j was.
    row.scores_against(q, n);
    row.value_scores_against(dout, n);
    for (std::size_t j = 0; j < n; ++j) p[j] = exp_at_most_zero(scale * p[j] - lse[i]);
    if (mask.drops()) {
      // dP_ij = m_ij (dO_i . V_j); dV takes the dropped p_ij m_ij.
      Real* m = row.mask.data();
      mask.draw(m, i, n);
      for (std::size_t j = 0; j < n; ++j) ds[j] = p[j] * (m[j] * ds[j] - row_term) * scale;
      for (std::size_t j = 0; j < n; ++j) p[j] *= m[j];
    } else {
      for (std::size_t j = 0; j < n; ++j) ds[j] = p[j] * (ds[j] - row_term) * scale;
    }
    Real* dq = grad_qkv + at.q(i);
    for (std::size_t j = 0; j < n; ++j) {
      const Real* k = qkv + at.k(j);
      Real* dk = grad_qkv + at.k(j);
      Real* dv = grad_qkv + at.v(j);
      // Three loops, not one: each vectorises on its own (dV, dQ and dK are disjoint).
      for (std::size_t d = 0; d < hs; ++d) dv[d] += p[j] * dout[d];
      for (std::size_t d = 0; d < hs; ++d) dq[d] += ds[j] * k[d];
      for (std::size_t d = 0; d < hs; ++d) dk[d] += ds[j] * q[d];
    }
  }
}

}  // namespace

template <class Real>
void causal_attention_forward(std::span<Real> output, std::span<Real> log_sum_exp,
                              std::span<const Real> qkv, const AttentionShape& shape,
                              const ComputeContext& compute, const AttentionDropout& dropout) {
  const Real scale = checked_scale<Real>(shape, qkv, output, log_sum_exp);
  const AttentionDropout drop = checked_dropout(dropout, shape);
  const std::size_t pair_cost = shape.time * shape.time * shape.head_size * 2;
  compute.parallel_for(shape.batch * shape.heads, grain_for(pair_cost),
                       [&](std::size_t p0, std::size_t p1) TESSERA_KERNEL_INLINE {
                         RowScratch<Real> row(shape);
                         for (std::size_t pair = p0; pair < p1; ++pair) {
                           attend_forward(row, HeadView(shape, pair), PairMask(drop, shape, pair),
                                          qkv.data(), scale, output.data(),
                                          log_sum_exp.data() + pair * shape.time);
                         }
                       });
}

template <class Real>
void causal_attention_backward(std::span<Real> grad_qkv, std::span<const Real> grad_output,
                               std::span<const Real> qkv, std::span<const Real> output,
                               std::span<const Real> log_sum_exp, const AttentionShape& shape,
                               const ComputeContext& compute, const AttentionDropout& dropout) {
  const Real scale = checked_scale<Real>(shape, qkv, output, log_sum_exp);
  const AttentionDropout drop = checked_dropout(dropout, shape);
  require_size("causal_attention", "grad_qkv", grad_qkv, qkv.size());
  require_size("causal_attention", "grad_output", grad_output, output.size());
  const std::size_t pair_cost = shape.time * shape.time * shape.head_size * 5;
  compute.parallel_for(shape.batch * shape.heads, grain_for(pair_cost),
                       [&](std::size_t p0, std::size_t p1) TESSERA_KERNEL_INLINE {
                         RowScratch<Real> row(shape);
                         for (std::size_t pair = p0; pair < p1; ++pair) {
                           attend_backward(row, HeadView(shape, pair), PairMask(drop, shape, pair),
                                           qkv.data(), output.data(), grad_output.data(),
                                           log_sum_exp.data() + pair * shape.time, scale,
                                           grad_qkv.data());
                         }
                       });
}

template void causal_attention_forward<float>(std::span<float>, std::span<float>,
                                              std::span<const float>, const AttentionShape&,
                                              const ComputeContext&, const AttentionDropout&);
template void causal_attention_forward<double>(std::span<double>, std::span<double>,
                                               std::span<const double>, const AttentionShape&,
                                               const ComputeContext&, const AttentionDropout&);
template void causal_attention_backward<float>(std::span<float>, std::span<const float>,
                                               std::span<const float>, std::span<const float>,
                                               std::span<const float>, const AttentionShape&,
                                               const ComputeContext&, const AttentionDropout&);
template void causal_attention_backward<double>(std::span<double>, std::span<const double>,
                                                std::span<const double>, std::span<const double>,
                                                std::span<const double>, const AttentionShape&,
                                                const ComputeContext&, const AttentionDropout&);

}  // namespace tessera::layers
