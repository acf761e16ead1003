// The embedding's and the layer norm's kernels (transformer_kernels.hpp); the formulas of
// ../embedding.cpp and ../layer_norm.cpp.
#include "layers/cuda/kernel_support.cuh"
#include "layers/cuda/transformer_kernels.hpp"

namespace tessera::layers::cuda {
namespace {

// --- Embedding ---------------------------------------------------------------------------------

template <class T>
__global__ void embedding_forward_kernel(const std::int64_t* tokens, const T* wte, const T* wpe,
                                         T* out, std::size_t n_tokens, std::size_t time,
                                         std::size_t channels) {
  const std::size_t n = n_tokens * channels;
  for (std::size_t i = first_index(); i < n; i += grid_stride()) {
    const std::size_t token = i / channels;
    const std::size_t c = i % channels;
    const auto row = static_cast<std::size_t>(tokens[token]);
    const float sum = Storage<T>::load(wte + row * channels + c) +
                      Storage<T>::load(wpe + (token % time) * channels + c);
    Storage<T>::store(out + i, sum);
  }
}

// Thread (s, c) owns element c of vocabulary row segments.rows[s]: no other thread writes it.
template <class T>
__global__ void embedding_token_grad_kernel(TokenSegments segments, const T* dy, T* grad_wte,
                                            std::size_t channels) {
  const std::size_t n = segments.segments * channels;
  for (std::size_t i = first_index(); i < n; i += grid_stride()) {
    const std::size_t s = i / channels;
    const std::size_t c = i % channels;
    T* g = grad_wte + static_cast<std::size_t>(segments.rows[s]) * channels + c;
    float sum = Storage<T>::load(g);
    const auto end = static_cast<std::size_t>(segments.start[s + 1]);
    for (auto k = static_cast<std::size_t>(segments.start[s]); k < end; ++k) {
      sum += Storage<T>::load(dy + static_cast<std::size_t>(segments.order[k]) * channels + c);
    }
    Storage<T>::store(g, sum);
  }
}

// Thread (t, c) owns element c of position t, adding the batch's rows b * time + t in order.
template <class T>
__global__ void embedding_position_grad_kernel(const T* dy, T* grad_wpe, std::size_t batch,
                                               std::size_t time, std::size_t channels) {
  const std::size_t n = time * channels;
  for (std::size_t i = first_index(); i < n; i += grid_stride()) {
    const std::size_t t = i / channels;
    const std::size_t c = i % channels;
    float sum = Storage<T>::load(grad_wpe + i);
    for (std::size_t b = 0; b < batch; ++b) {
      sum += Storage<T>::load(dy + (b * time + t) * channels + c);
    }
    Storage<T>::store(grad_wpe + i, sum);
  }
}

// --- Layer norm --------------------------------------------------------------------------------

// Warp w of the grid owns rows w, w + warps, ...; lane l reads channels l, l + 32, ... Every lane
// of a warp runs the same rows, so the shuffles see all 32.
template <class T>
__global__ void layer_norm_forward_kernel(const T* x, const T* weight, const T* bias, T* y,
                                          float* mean, float* rstd, std::size_t rows,
                                          std::size_t channels, float eps) {
  const unsigned lane = threadIdx.x % kWarp;
  const std::size_t warps = grid_stride() / kWarp;
  const float inv_channels = 1.0F / static_cast<float>(channels);
  for (std::size_t r = first_index() / kWarp; r < rows; r += warps) {
    const T* xr = x + r * channels;
    float sum = 0.0F;
    for (std::size_t c = lane; c < channels; c += kWarp) sum += Storage<T>::load(xr + c);
    const float m = warp_sum<float>(sum) * inv_channels;
    float squares = 0.0F;
    for (std::size_t c = lane; c < channels; c += kWarp) {
      const float d = Storage<T>::load(xr + c) - m;
      squares += d * d;
    }
    const float s = 1.0F / sqrtf(warp_sum<float>(squares) * inv_channels + eps);
    T* yr = y + r * channels;
    for (std::size_t c = lane; c < channels; c += kWarp) {
      const float xhat = (Storage<T>::load(xr + c) - m) * s;
      Storage<T>::store(yr + c, xhat * Storage<T>::load(weight + c) + Storage<T>::load(bias + c));
    }
    if (lane == 0) {
      mean[r] = m;
      rstd[r] = s;
    }
  }
}

// The input gradient, a warp a row as in forward:
// dx += rstd * (g - mean_c(g) - xhat * mean_c(g * xhat)), g = dy * weight.
template <class T>
__global__ void layer_norm_input_grad_kernel(const T* dy, const T* x, const T* weight,
                                             const float* mean, const float* rstd, T* dx,
                                             std::size_t rows, std::size_t channels) {
  const unsigned lane = threadIdx.x % kWarp;
  const std::size_t warps = grid_stride() / kWarp;
  const float inv_channels = 1.0F / static_cast<float>(channels);
  for (std::size_t r = first_index() / kWarp; r < rows; r += warps) {
    const T* xr = x + r * channels;
    const T* dyr = dy + r * channels;
    const float m = mean[r];
    const float s = rstd[r];
    float mean_g = 0.0F;
    float mean_g_xhat = 0.0F;
    for (std::size_t c = lane; c < channels; c += kWarp) {
      const float g = Storage<T>::load(dyr + c) * Storage<T>::load(weight + c);
      mean_g += g;
      mean_g_xhat += g * (Storage<T>::load(xr + c) - m) * s;
    }
    mean_g = warp_sum<float>(mean_g) * inv_channels;
    mean_g_xhat = warp_sum<float>(mean_g_xhat) * inv_channels;
    T* dxr = dx + r * channels;
    for (std::size_t c = lane; c < channels; c += kWarp) {
      const float xhat = (Storage<T>::load(xr + c) - m) * s;
      const float g = Storage<T>::load(dyr + c) * Storage<T>::load(weight + c);
      Storage<T>::store(dxr + c, Storage<T>::load(dxr + c) + s * (g - mean_g - xhat * mean_g_xhat));
    }
  }
}

// Thread (chunk, c) sums rows [chunk * R, min(rows, (chunk + 1) * R)) of channel c in row order:
// dy * xhat into partial_weight, dy into partial_bias ([chunks, channels] each).
template <class T>
__global__ void layer_norm_partial_grad_kernel(const T* dy, const T* x, const float* mean,
                                               const float* rstd, float* partial_weight,
                                               float* partial_bias, std::size_t rows,
                                               std::size_t channels) {
  const std::size_t n = layer_norm_partials(rows) * channels;
  for (std::size_t i = first_index(); i < n; i += grid_stride()) {
    const std::size_t chunk = i / channels;
    const std::size_t c = i % channels;
    const std::size_t first = chunk * kLayerNormRowsPerPartial;
    const std::size_t last =
        first + kLayerNormRowsPerPartial < rows ? first + kLayerNormRowsPerPartial : rows;
    float w = 0.0F;
    float b = 0.0F;
    for (std::size_t r = first; r < last; ++r) {
      const float g = Storage<T>::load(dy + r * channels + c);
      w += g * (Storage<T>::load(x + r * channels + c) - mean[r]) * rstd[r];
      b += g;
    }
    partial_weight[i] = w;
    partial_bias[i] = b;
  }
}

// Thread c adds the chunks' partial sums of channel c, in chunk order, onto the gradients.
template <class T>
__global__ void layer_norm_param_grad_kernel(const float* partial_weight, const float* partial_bias,
                                             T* grad_weight, T* grad_bias, std::size_t chunks,
                                             std::size_t channels) {
  for (std::size_t c = first_index(); c < channels; c += grid_stride()) {
    float w = Storage<T>::load(grad_weight + c);
    float b = Storage<T>::load(grad_bias + c);
    for (std::size_t k = 0; k < chunks; ++k) {
      w += partial_weight[k * channels + c];
      b += partial_bias[k * channels + c];
    }
    Storage<T>::store(grad_weight + c, w);
    Storage<T>::store(grad_bias + c, b);
  }
}

}  // namespace

cudaError_t launch_embedding_forward(const std::int64_t* tokens, const float* wte, const float* wpe,
                                     float* out, std::size_t n_tokens, std::size_t time,
                                     std::size_t channels) {
  if (n_tokens * channels == 0) return cudaSuccess;
  embedding_forward_kernel<float><<<blocks_for(n_tokens * channels), kThreads, 0, nullptr>>>(
      tokens, wte, wpe, out, n_tokens, time, channels);
  return cudaGetLastError();
}

cudaError_t launch_embedding_backward(const TokenSegments& segments, const float* grad_output,
                                      float* grad_wte, float* grad_wpe, std::size_t batch,
                                      std::size_t time, std::size_t channels) {
  if (batch * time * channels == 0) return cudaSuccess;
  embedding_token_grad_kernel<float>
      <<<blocks_for(segments.segments * channels), kThreads, 0, nullptr>>>(segments, grad_output,
                                                                           grad_wte, channels);
  const cudaError_t launched = cudaGetLastError();
  if (launched != cudaSuccess) return launched;
  embedding_position_grad_kernel<float><<<blocks_for(time * channels), kThreads, 0, nullptr>>>(
      grad_output, grad_wpe, batch, time, channels);
  return cudaGetLastError();
}

cudaError_t launch_layer_norm_forward(const float* x, const float* weight, const float* bias,
                                      float* y, float* mean, float* rstd, std::size_t rows,
                                      std::size_t channels, float eps) {
  if (rows == 0) return cudaSuccess;
  layer_norm_forward_kernel<float><<<blocks_for(rows, kThreads / kWarp), kThreads, 0, nullptr>>>(
      x, weight, bias, y, mean, rstd, rows, channels, eps);
  return cudaGetLastError();
}

cudaError_t launch_layer_norm_backward(const float* dy, const float* x, const float* weight,
                                       const float* mean, const float* rstd, float* dx,
                                       float* grad_weight, float* grad_bias, float* partials,
                                       std::size_t rows, std::size_t channels) {
  if (rows == 0) return cudaSuccess;
  layer_norm_input_grad_kernel<float><<<blocks_for(rows, kThreads / kWarp), kThreads, 0, nullptr>>>(
      dy, x, weight, mean, rstd, dx, rows, channels);
  cudaError_t launched = cudaGetLastError();
  if (launched != cudaSuccess) return launched;
  const std::size_t chunks = layer_norm_partials(rows);
  float* partial_weight = partials;
  float* partial_bias = partials + chunks * channels;
  layer_norm_partial_grad_kernel<float><<<blocks_for(chunks * channels), kThreads, 0, nullptr>>>(
      dy, x, mean, rstd, partial_weight, partial_bias, rows, channels);
  launched = cudaGetLastError();
  if (launched != cudaSuccess) return launched;
  layer_norm_param_grad_kernel<float><<<blocks_for(channels), kThreads, 0, nullptr>>>(
      partial_weight, partial_bias, grad_weight, grad_bias, chunks, channels);
  return cudaGetLastError();
}

}  // namespace tessera::layers::cuda
