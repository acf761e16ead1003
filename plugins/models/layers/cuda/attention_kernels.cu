// Causal multi-head self-attention on the GPU, FlashAttention's way (Dao et al. 2022; the
// backward as FlashAttention-2 recomputes it), with the layouts and formulas of
// ../causal_attention.hpp: forward keeps only the log-sum-exps, backward recomputes each
// probability p_ij = exp(scale q_i . k_j - lse_i).
//
// One thread computes one row: a query row in forward and in the dQ kernel, a key row in the dK/dV
// kernel. A block of kRows such rows of one (batch, head) pair walks the other side's rows in
// tiles of kTile through shared memory; the block's own rows sit transposed in shared memory
// ([d][row]: a warp reads 32 consecutive words, no bank conflict), a tile's rows as they are
// ([row][d]: every thread reads the same word, a broadcast). Vectors are zero-padded to kHead,
// the compile-time head size (32, 64 or 128), so that the loops over d have fixed trip counts and
// the per-thread accumulators stay in registers: the padding adds only exact zeros. Every output
// element is written by one thread that sums in a fixed order (keys or queries in increasing
// order, d in order): no atomics, the same bits from run to run.
#include <cmath>

#include "layers/cuda/kernel_support.cuh"
#include "layers/cuda/transformer_kernels.hpp"

namespace tessera::layers::cuda {
namespace {

// Rows a block owns and rows a tile holds, per head size, within the 48 KiB of static shared
// memory (the backward kernels hold two own arrays and two tiles). An own array's rows are
// kStride = kRows + 1 apart, so that the load's writes (32 consecutive d of one row) fall in 32
// banks too.
template <int kHead>
struct Tiling;
template <>
struct Tiling<32> {
  static constexpr int kRows = 64;
  static constexpr int kTile = 32;
};
template <>
struct Tiling<64> {
  static constexpr int kRows = 64;
  static constexpr int kTile = 16;
};
template <>
struct Tiling<128> {
  static constexpr int kRows = 32;
  static constexpr int kTile = 8;
};

template <int kHead>
constexpr std::size_t backward_shared_bytes() {
  constexpr std::size_t rows = Tiling<kHead>::kRows;
  constexpr std::size_t tile = Tiling<kHead>::kTile;
  return sizeof(float) * (2 * kHead * (rows + 1) + 2 * kHead * tile + 2 * tile);
}
static_assert(backward_shared_bytes<32>() <= 48 * 1024);
static_assert(backward_shared_bytes<64>() <= 48 * 1024);
static_assert(backward_shared_bytes<128>() <= 48 * 1024);

// Where one (batch, head) pair's vectors lie, in elements: token t's Q at q(t), K at q(t) +
// channels, V at q(t) + 2 channels; its output (and output gradient) at out(t).
struct PairView {
  std::size_t time = 0;
  std::size_t head_size = 0;
  std::size_t channels = 0;
  std::size_t qkv_start = 0;
  std::size_t out_start = 0;
  std::size_t stats_start = 0;  // of the pair's rows in log_sum_exp and row_terms

  __device__ PairView(const AttentionDims& dims, std::size_t pair)
      : time(dims.time), head_size(dims.head_size), channels(dims.heads * dims.head_size) {
    const std::size_t b = pair / dims.heads;
    const std::size_t h = pair % dims.heads;
    qkv_start = b * dims.time * 3 * channels + h * dims.head_size;
    out_start = b * dims.time * channels + h * dims.head_size;
    stats_start = pair * dims.time;
  }
  [[nodiscard]] __device__ std::size_t q(std::size_t t) const {
    return qkv_start + t * 3 * channels;
  }
  [[nodiscard]] __device__ std::size_t k(std::size_t t) const { return q(t) + channels; }
  [[nodiscard]] __device__ std::size_t v(std::size_t t) const { return q(t) + 2 * channels; }
  [[nodiscard]] __device__ std::size_t out(std::size_t t) const { return out_start + t * channels; }
};

// Which of a token's vectors a load reads: Q, K or V of qkv, or the row of the output (or of its
// gradient, laid out alike).
enum class Part { query, key, value, output };

__device__ inline std::size_t where(const PairView& pair, Part part, std::size_t t) {
  switch (part) {
    case Part::query: return pair.q(t);
    case Part::key: return pair.k(t);
    case Part::value: return pair.v(t);
    case Part::output: break;
  }
  return pair.out(t);
}

// The rows of a block of kRows threads: block (pair, y) owns rows [y kRows, (y + 1) kRows) of
// pair blockIdx.x, thread x row y kRows + x, which may lie past the sequence (inactive: it still
// loads and waits with the others).
template <int kRows>
struct BlockRows {
  PairView pair;
  std::size_t first;
  std::size_t row;
  bool active;

  __device__ explicit BlockRows(const AttentionDims& dims)
      : pair(dims, blockIdx.x),
        first(static_cast<std::size_t>(blockIdx.y) * kRows),
        row(first + threadIdx.x),
        active(row < dims.time) {}
};

// own[d][r] = src[where(pair, part, first + r) + d] for the block's kRows rows, 0 past the sequence
// or the head.
template <int kHead, int kRows, class T>
__device__ void load_own(float (&own)[kHead][kRows + 1], const T* src, std::size_t first,
                         const PairView& pair, Part part) {
  constexpr unsigned kCount = kHead * kRows;
  for (unsigned idx = threadIdx.x; idx < kCount; idx += kRows) {
    const unsigned r = idx / kHead;
    const unsigned d = idx % kHead;
    const std::size_t t = first + r;
    own[d][r] = t < pair.time && d < pair.head_size
                    ? Storage<T>::load(src + where(pair, part, t) + d)
                    : 0.0F;
  }
}

// tile[r][d] = src[where(pair, part, first + r) + d] for a tile's kTile rows, 0 past the sequence
// or the head.
template <int kHead, int kRows, int kTile, class T>
__device__ void load_tile(float (&tile)[kTile][kHead], const T* src, std::size_t first,
                          const PairView& pair, Part part) {
  constexpr unsigned kCount = kHead * kTile;
  for (unsigned idx = threadIdx.x; idx < kCount; idx += kRows) {
    const unsigned r = idx / kHead;
    const unsigned d = idx % kHead;
    const std::size_t t = first + r;
    tile[r][d] = t < pair.time && d < pair.head_size
                     ? Storage<T>::load(src + where(pair, part, t) + d)
                     : 0.0F;
  }
}

// The dot product of the calling thread's own row with row r of a tile, d in order.
template <int kHead, int kRows, int kTile>
__device__ float own_dot_tile(const float (&own)[kHead][kRows + 1],
                              const float (&tile)[kTile][kHead], unsigned r) {
  float sum = 0.0F;
#pragma unroll
  for (int d = 0; d < kHead; ++d) sum += own[d][threadIdx.x] * tile[r][d];
  return sum;
}

// --- Forward -----------------------------------------------------------------------------------

// Block (pair, y) computes query rows [y kRows, (y + 1) kRows) of the pair; thread x row
// y kRows + x. The online softmax: m the largest scaled score so far, l the sum of
// exp(score - m), o the sum of exp(score - m) v; a larger score rescales l and o by
// exp(m_old - m_new) <= 1.
template <int kHead, class T>
__global__ void __launch_bounds__(Tiling<kHead>::kRows)
    attention_forward_kernel(const T* qkv, T* out, float* log_sum_exp, AttentionDims dims,
                             float scale) {
  constexpr int kRows = Tiling<kHead>::kRows;
  constexpr int kTile = Tiling<kHead>::kTile;
  __shared__ float q_own[kHead][kRows + 1];
  __shared__ float k_tile[kTile][kHead];
  __shared__ float v_tile[kTile][kHead];
  const BlockRows<kRows> block(dims);
  const PairView& pair = block.pair;
  const std::size_t first = block.first;
  const std::size_t i = block.row;
  load_own<kHead, kRows>(q_own, qkv, first, pair, Part::query);

  float o[kHead];
#pragma unroll
  for (int d = 0; d < kHead; ++d) o[d] = 0.0F;
  float m = -INFINITY;
  float l = 0.0F;
  // The keys any row of this block attends to: 0 .. min(T, first + kRows) - 1.
  const std::size_t keys = first + kRows < dims.time ? first + kRows : dims.time;
  for (std::size_t k0 = 0; k0 < keys; k0 += kTile) {
    __syncthreads();  // the tiles (and, the first time, q_own) are free to write / complete
    load_tile<kHead, kRows, kTile>(k_tile, qkv, k0, pair, Part::key);
    load_tile<kHead, kRows, kTile>(v_tile, qkv, k0, pair, Part::value);
    __syncthreads();
    if (!block.active) continue;
    // Keys k0 + r <= i of this tile.
    const std::size_t end = i + 1 < k0 + kTile ? i + 1 : k0 + kTile;
    for (unsigned r = 0; k0 + r < end; ++r) {
      const float s = own_dot_tile<kHead, kRows, kTile>(q_own, k_tile, r) * scale;
      if (s > m) {
        const float shrink = expf(m - s);  // 0 for the first key, m = -inf
        l *= shrink;
#pragma unroll
        for (int d = 0; d < kHead; ++d) o[d] *= shrink;
        m = s;
      }
      const float p = expf(s - m);
      l += p;
#pragma unroll
      for (int d = 0; d < kHead; ++d) o[d] += p * v_tile[r][d];
    }
  }
  if (!block.active) return;
    // Every row attends to key 0 at least, so l >= 1.
#pragma unroll
  for (int d = 0; d < kHead; ++d) {
    if (d < static_cast<int>(dims.head_size)) Storage<T>::store(out + pair.out(i) + d, o[d] / l);
  }
  log_sum_exp[pair.stats_start + i] = m + logf(l);
}

// --- Backward ----------------------------------------------------------------------------------

// row_terms[pair, i] = dO_i . O_i, one thread a row, d in order.
template <class T>
__global__ void attention_row_terms_kernel(const T* out, const T* grad_out, float* row_terms,
                                           AttentionDims dims) {
  const std::size_t n = dims.batch * dims.heads * dims.time;
  for (std::size_t idx = first_index(); idx < n; idx += grid_stride()) {
    const PairView pair(dims, idx / dims.time);
    const std::size_t at = pair.out(idx % dims.time);
    float sum = 0.0F;
    for (std::size_t d = 0; d < dims.head_size; ++d) {
      sum += Storage<T>::load(grad_out + at + d) * Storage<T>::load(out + at + d);
    }
    row_terms[idx] = sum;
  }
}

// dQ_i += scale sum_{j <= i} p_ij (dO_i . V_j - D_i) K_j: thread x of block (pair, y) owns query
// row y kRows + x and walks the keys 0 .. i in order.
template <int kHead, class T>
__global__ void __launch_bounds__(Tiling<kHead>::kRows)
    attention_grad_query_kernel(const T* qkv, const T* grad_out, const float* log_sum_exp,
                                const float* row_terms, T* grad_qkv, AttentionDims dims,
                                float scale) {
  constexpr int kRows = Tiling<kHead>::kRows;
  constexpr int kTile = Tiling<kHead>::kTile;
  __shared__ float q_own[kHead][kRows + 1];
  __shared__ float dout_own[kHead][kRows + 1];
  __shared__ float k_tile[kTile][kHead];
  __shared__ float v_tile[kTile][kHead];
  const BlockRows<kRows> block(dims);
  const PairView& pair = block.pair;
  const std::size_t first = block.first;
  const std::size_t i = block.row;
  load_own<kHead, kRows>(q_own, qkv, first, pair, Part::query);
  load_own<kHead, kRows>(dout_own, grad_out, first, pair, Part::output);
  const float lse = block.active ? log_sum_exp[pair.stats_start + i] : 0.0F;
  const float row_term = block.active ? row_terms[pair.stats_start + i] : 0.0F;

  float dq[kHead];
#pragma unroll
  for (int d = 0; d < kHead; ++d) dq[d] = 0.0F;
  const std::size_t keys = first + kRows < dims.time ? first + kRows : dims.time;
  for (std::size_t k0 = 0; k0 < keys; k0 += kTile) {
    __syncthreads();
    load_tile<kHead, kRows, kTile>(k_tile, qkv, k0, pair, Part::key);
    load_tile<kHead, kRows, kTile>(v_tile, qkv, k0, pair, Part::value);
    __syncthreads();
    if (!block.active) continue;
    const std::size_t end = i + 1 < k0 + kTile ? i + 1 : k0 + kTile;
    for (unsigned r = 0; k0 + r < end; ++r) {
      const float p = expf(own_dot_tile<kHead, kRows, kTile>(q_own, k_tile, r) * scale - lse);
      const float dp = own_dot_tile<kHead, kRows, kTile>(dout_own, v_tile, r);
      const float ds = p * (dp - row_term) * scale;
#pragma unroll
      for (int d = 0; d < kHead; ++d) dq[d] += ds * k_tile[r][d];
    }
  }
  if (!block.active) return;
  T* g = grad_qkv + pair.q(i);
#pragma unroll
  for (int d = 0; d < kHead; ++d) {
    if (d < static_cast<int>(dims.head_size))
      Storage<T>::store(g + d, Storage<T>::load(g + d) + dq[d]);
  }
}

// dV_j += sum_{i >= j} p_ij dO_i and dK_j += scale sum_{i >= j} p_ij (dO_i . V_j - D_i) Q_i:
// thread x of block (pair, y) owns key row j = y kRows + x and walks the queries j .. T - 1 in
// order.
template <int kHead, class T>
__global__ void __launch_bounds__(Tiling<kHead>::kRows)
    attention_grad_key_value_kernel(const T* qkv, const T* grad_out, const float* log_sum_exp,
                                    const float* row_terms, T* grad_qkv, AttentionDims dims,
                                    float scale) {
  constexpr int kRows = Tiling<kHead>::kRows;
  constexpr int kTile = Tiling<kHead>::kTile;
  __shared__ float k_own[kHead][kRows + 1];
  __shared__ float v_own[kHead][kRows + 1];
  __shared__ float q_tile[kTile][kHead];
  __shared__ float dout_tile[kTile][kHead];
  __shared__ float lse_tile[kTile];
  __shared__ float term_tile[kTile];
  const BlockRows<kRows> block(dims);
  const PairView& pair = block.pair;
  const std::size_t first = block.first;
  const std::size_t j = block.row;
  load_own<kHead, kRows>(k_own, qkv, first, pair, Part::key);
  load_own<kHead, kRows>(v_own, qkv, first, pair, Part::value);

  float dk[kHead];
  float dv[kHead];
#pragma unroll
  for (int d = 0; d < kHead; ++d) {
    dk[d] = 0.0F;
    dv[d] = 0.0F;
  }
  // Queries before `first` see none of this block's keys.
  for (std::size_t q0 = first; q0 < dims.time; q0 += kTile) {
    __syncthreads();
    load_tile<kHead, kRows, kTile>(q_tile, qkv, q0, pair, Part::query);
    load_tile<kHead, kRows, kTile>(dout_tile, grad_out, q0, pair, Part::output);
    if (threadIdx.x < kTile) {
      const std::size_t t = q0 + threadIdx.x;
      lse_tile[threadIdx.x] = t < dims.time ? log_sum_exp[pair.stats_start + t] : 0.0F;
      term_tile[threadIdx.x] = t < dims.time ? row_terms[pair.stats_start + t] : 0.0F;
    }
    __syncthreads();
    if (!block.active) continue;
    for (unsigned r = 0; r < kTile; ++r) {
      const std::size_t query = q0 + r;
      if (query >= dims.time) break;
      if (query < j) continue;
      const float p =
          expf(own_dot_tile<kHead, kRows, kTile>(k_own, q_tile, r) * scale - lse_tile[r]);
      const float dp = own_dot_tile<kHead, kRows, kTile>(v_own, dout_tile, r);
      const float ds = p * (dp - term_tile[r]) * scale;
#pragma unroll
      for (int d = 0; d < kHead; ++d) {
        dv[d] += p * dout_tile[r][d];
        dk[d] += ds * q_tile[r][d];
      }
    }
  }
  if (!block.active) return;
  T* gk = grad_qkv + pair.k(j);
  T* gv = grad_qkv + pair.v(j);
#pragma unroll
  for (int d = 0; d < kHead; ++d) {
    if (d < static_cast<int>(dims.head_size)) {
      Storage<T>::store(gk + d, Storage<T>::load(gk + d) + dk[d]);
      Storage<T>::store(gv + d, Storage<T>::load(gv + d) + dv[d]);
    }
  }
}

template <int kHead>
dim3 grid_of(const AttentionDims& dims) {
  const std::size_t row_blocks = (dims.time + Tiling<kHead>::kRows - 1) / Tiling<kHead>::kRows;
  return {static_cast<unsigned>(dims.batch * dims.heads), static_cast<unsigned>(row_blocks), 1};
}

// Whether one grid covers the call: pairs in x (up to 2^31 - 1), row blocks in y (65535).
bool fits_one_grid(const AttentionDims& dims) {
  const std::size_t row_blocks = (dims.time + 31) / 32;  // the smallest kRows
  return dims.batch * dims.heads <= 0x7fffffffU && row_blocks <= 65535 && dims.head_size > 0 &&
         dims.head_size <= kMaxAttentionHeadSize;
}

float scale_of(const AttentionDims& dims) {
  return 1.0F / std::sqrt(static_cast<float>(dims.head_size));
}

template <int kHead>
cudaError_t forward_for(const float* qkv, float* out, float* log_sum_exp,
                        const AttentionDims& dims) {
  attention_forward_kernel<kHead, float>
      <<<grid_of<kHead>(dims), Tiling<kHead>::kRows, 0, nullptr>>>(qkv, out, log_sum_exp, dims,
                                                                   scale_of(dims));
  return cudaGetLastError();
}

template <int kHead>
cudaError_t backward_for(const float* qkv, const float* grad_out, const float* log_sum_exp,
                         const float* row_terms, float* grad_qkv, const AttentionDims& dims) {
  const dim3 grid = grid_of<kHead>(dims);
  attention_grad_query_kernel<kHead, float><<<grid, Tiling<kHead>::kRows, 0, nullptr>>>(
      qkv, grad_out, log_sum_exp, row_terms, grad_qkv, dims, scale_of(dims));
  const cudaError_t launched = cudaGetLastError();
  if (launched != cudaSuccess) return launched;
  attention_grad_key_value_kernel<kHead, float><<<grid, Tiling<kHead>::kRows, 0, nullptr>>>(
      qkv, grad_out, log_sum_exp, row_terms, grad_qkv, dims, scale_of(dims));
  return cudaGetLastError();
}

}  // namespace

cudaError_t launch_causal_attention_forward(const float* qkv, float* out, float* log_sum_exp,
                                            const AttentionDims& dims) {
  if (dims.batch * dims.heads * dims.time == 0) return cudaSuccess;
  if (!fits_one_grid(dims)) return cudaErrorInvalidValue;
  if (dims.head_size <= 32) return forward_for<32>(qkv, out, log_sum_exp, dims);
  if (dims.head_size <= 64) return forward_for<64>(qkv, out, log_sum_exp, dims);
  return forward_for<128>(qkv, out, log_sum_exp, dims);
}

cudaError_t launch_causal_attention_backward(const float* qkv, const float* out,
                                             const float* grad_out, const float* log_sum_exp,
                                             float* row_terms, float* grad_qkv,
                                             const AttentionDims& dims) {
  const std::size_t rows = dims.batch * dims.heads * dims.time;
  if (rows == 0) return cudaSuccess;
  if (!fits_one_grid(dims)) return cudaErrorInvalidValue;
  attention_row_terms_kernel<float>
      <<<blocks_for(rows), kThreads, 0, nullptr>>>(out, grad_out, row_terms, dims);
  const cudaError_t launched = cudaGetLastError();
  if (launched != cudaSuccess) return launched;
  if (dims.head_size <= 32) {
    return backward_for<32>(qkv, grad_out, log_sum_exp, row_terms, grad_qkv, dims);
  }
  if (dims.head_size <= 64) {
    return backward_for<64>(qkv, grad_out, log_sum_exp, row_terms, grad_qkv, dims);
  }
  return backward_for<128>(qkv, grad_out, log_sum_exp, row_terms, grad_qkv, dims);
}

}  // namespace tessera::layers::cuda
