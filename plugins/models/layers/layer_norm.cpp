#include "layers/layer_norm.hpp"

#include <cmath>

#include "layers/kernel_support.hpp"
#include "layers/layer_checks.hpp"

namespace tessera::layers {
namespace {

template <class Real>
void check_shapes(std::size_t rows, std::size_t channels, std::span<const Real> input,
                  std::span<const Real> weight, std::span<const Real> mean,
                  std::span<const Real> rstd) {
  TESSERA_CHECK(channels > 0, "layer_norm: channels must be positive");
  require_size("layer_norm", "input", input, rows * channels);
  require_size("layer_norm", "weight", weight, channels);
  require_size("layer_norm", "mean", mean, rows);
  require_size("layer_norm", "rstd", rstd, rows);
}

}  // namespace

template <class Real>
void layer_norm_forward(std::span<Real> output, std::span<Real> mean, std::span<Real> rstd,
                        std::span<const Real> input, std::span<const Real> weight,
                        std::span<const Real> bias, std::size_t rows, std::size_t channels,
                        const ComputeContext& compute) {
  check_shapes<Real>(rows, channels, input, weight, mean, rstd);
  require_size("layer_norm", "output", output, rows * channels);
  require_size("layer_norm", "bias", bias, channels);
  const Real inv_channels = Real(1) / static_cast<Real>(channels);
  compute.parallel_for(
      rows, grain_for(4 * channels), [&](std::size_t r0, std::size_t r1) TESSERA_KERNEL_INLINE {
        for (std::size_t r = r0; r < r1; ++r) {
          const Real* x = input.data() + r * channels;
          Real* y = output.data() + r * channels;
          Real sum = 0;
          for (std::size_t c = 0; c < channels; ++c) sum += x[c];
          const Real m = sum * inv_channels;
          // Two passes (mean, then squared deviations): no cancellation when |mean| >> spread.
          Real squares = 0;
          for (std::size_t c = 0; c < channels; ++c) squares += (x[c] - m) * (x[c] - m);
          const Real s =
              Real(1) / std::sqrt(squares * inv_channels + static_cast<Real>(kLayerNormEps));
          for (std::size_t c = 0; c < channels; ++c) y[c] = (x[c] - m) * s * weight[c] + bias[c];
          mean[r] = m;
          rstd[r] = s;
        }
      });
}

template <class Real>
void layer_norm_backward(std::span<Real> grad_input, std::span<Real> grad_weight,
                         std::span<Real> grad_bias, std::span<const Real> grad_output,
                         std::span<const Real> input, std::span<const Real> weight,
                         std::span<const Real> mean, std::span<const Real> rstd, std::size_t rows,
                         std::size_t channels, const ComputeContext& compute) {
  check_shapes<Real>(rows, channels, input, weight, mean, rstd);
  require_size("layer_norm", "grad_input", grad_input, rows * channels);
  require_size("layer_norm", "grad_output", grad_output, rows * channels);
  require_size("layer_norm", "grad_weight", grad_weight, channels);
  require_size("layer_norm", "grad_bias", grad_bias, channels);
  const Real inv_channels = Real(1) / static_cast<Real>(channels);
  // The input gradient row by row: each row needs only its own two means.
  compute.parallel_for(rows, grain_for(6 * channels),
                       [&](std::size_t r0, std::size_t r1) TESSERA_KERNEL_INLINE {
                         for (std::size_t r = r0; r < r1; ++r) {
                           const Real* x = input.data() + r * channels;
                           const Real* dy = grad_output.data() + r * channels;
                           Real* dx = grad_input.data() + r * channels;
                           const Real m = mean[r];
                           const Real s = rstd[r];
                           Real mean_g = 0;
                           Real mean_g_xhat = 0;
                           for (std::size_t c = 0; c < channels; ++c) {
                             const Real g = dy[c] * weight[c];
                             mean_g += g;
                             mean_g_xhat += g * (x[c] - m) * s;
                           }
                           mean_g *= inv_channels;
                           mean_g_xhat *= inv_channels;
                           for (std::size_t c = 0; c < channels; ++c) {
                             const Real xhat = (x[c] - m) * s;
                             dx[c] += s * (dy[c] * weight[c] - mean_g - xhat * mean_g_xhat);
                           }
                         }
                       });
  // The parameter gradients channel block by channel block, rows in order: sums over rows
  // that do not depend on the split.
  compute.parallel_for(channels, std::max<std::size_t>(16, grain_for(2 * rows)),
                       [&](std::size_t c0, std::size_t c1) TESSERA_KERNEL_INLINE {
                         for (std::size_t r = 0; r < rows; ++r) {
                           const Real* x = input.data() + r * channels;
                           const Real* dy = grad_output.data() + r * channels;
                           for (std::size_t c = c0; c < c1; ++c) {
                             grad_weight[c] += dy[c] * (x[c] - mean[r]) * rstd[r];
                             grad_bias[c] += dy[c];
                           }
                         }
                       });
}

#define TESSERA_LAYER_NORM_INSTANCES(Real)                                                        \
  template void layer_norm_forward<Real>(std::span<Real>, std::span<Real>, std::span<Real>,       \
                                         std::span<const Real>, std::span<const Real>,            \
                                         std::span<const Real>, std::size_t, std::size_t,         \
                                         const ComputeContext&);                                  \
  template void layer_norm_backward<Real>(                                                        \
      std::span<Real>, std::span<Real>, std::span<Real>, std::span<const Real>,                   \
      std::span<const Real>, std::span<const Real>, std::span<const Real>, std::span<const Real>, \
      std::size_t, std::size_t, const ComputeContext&);
TESSERA_LAYER_NORM_INSTANCES(float)
TESSERA_LAYER_NORM_INSTANCES(double)
#undef TESSERA_LAYER_NORM_INSTANCES

namespace {

constexpr const char* kKernel = "layer_norm";

std::size_t checked_rows(const Tensor& input, std::size_t channels, Device device) {
  TESSERA_CHECK(channels > 0, "layer_norm: channels must be positive");
  const std::size_t rows = input.count() / channels;
  check_floats(kKernel, "input", input.view(), rows * channels, device);
  return rows;
}

std::span<const float> host_floats(const BufferView& view, const char* what) {
  return view.host_span<const float>(what);
}

}  // namespace

LayerNormOutput layer_norm_forward(const Tensor& input, const BufferView& weight,
                                   const BufferView& bias, std::size_t channels,
                                   const ComputeContext& compute) {
  const Device device = compute_device(kKernel, input);
  const std::size_t rows = checked_rows(input, channels, device);
  check_floats(kKernel, "weight", weight, channels, device);
  check_floats(kKernel, "bias", bias, channels, device);
  if (device != Device::cpu()) {
    return device::layer_norm_forward(input, static_cast<const float*>(weight.data),
                                      static_cast<const float*>(bias.data), rows, channels);
  }
  LayerNormOutput n{Tensor(input.shape(), DType::f32), Tensor({rows}, DType::f32),
                    Tensor({rows}, DType::f32)};
  layer_norm_forward<float>(n.output.as<float>(), n.mean.as<float>(), n.rstd.as<float>(),
                            input.as<float>(), host_floats(weight, "layer_norm weight"),
                            host_floats(bias, "layer_norm bias"), rows, channels, compute);
  return n;
}

void layer_norm_backward(const Tensor& grad_input, const BufferView& grad_weight,
                         const BufferView& grad_bias, const Tensor& grad_output,
                         const Tensor& input, const BufferView& weight, const Tensor& mean,
                         const Tensor& rstd, std::size_t channels, const ComputeContext& compute) {
  const Device device = compute_device(kKernel, input);
  const std::size_t rows = checked_rows(input, channels, device);
  check_floats(kKernel, "grad_input", grad_input.view(), rows * channels, device);
  check_floats(kKernel, "grad_output", grad_output.view(), rows * channels, device);
  check_floats(kKernel, "weight", weight, channels, device);
  check_floats(kKernel, "grad_weight", grad_weight, channels, device);
  check_floats(kKernel, "grad_bias", grad_bias, channels, device);
  check_floats(kKernel, "mean", mean.view(), rows, device);
  check_floats(kKernel, "rstd", rstd.view(), rows, device);
  if (device != Device::cpu()) {
    device::layer_norm_backward(grad_input, static_cast<float*>(grad_weight.data),
                                static_cast<float*>(grad_bias.data), grad_output, input,
                                static_cast<const float*>(weight.data), mean, rstd, rows, channels);
    return;
  }
  layer_norm_backward<float>(grad_input.as<float>(), grad_weight.host_span<float>("grad_weight"),
                             grad_bias.host_span<float>("grad_bias"), grad_output.as<float>(),
                             input.as<float>(), host_floats(weight, "layer_norm weight"),
                             mean.as<float>(), rstd.as<float>(), rows, channels, compute);
}

}  // namespace tessera::layers
