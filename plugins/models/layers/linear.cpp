#include "layers/linear.hpp"

#include <cblas.h>

#include <algorithm>

#include "layers/layer_checks.hpp"

namespace tessera::layers {
namespace {

int blas_int(std::size_t v) {
  return static_cast<int>(v);
}

}  // namespace

Linear::Linear(std::string name, std::size_t in_features, std::size_t out_features,
               std::shared_ptr<const ComputeContext> compute)
    : name_(std::move(name)), in_(in_features), out_(out_features), compute_(std::move(compute)) {
  TESSERA_CHECK(in_ > 0 && out_ > 0, name_ + ": features must be positive");
  TESSERA_CHECK(compute_ != nullptr, name_ + ": needs a compute context");
  specs_.push_back(
      {name_ + ".weight", {out_, in_}, DType::f32, ParamInit::kaiming_uniform, in_, out_, {}});
  specs_.push_back({name_ + ".bias", {out_}, DType::f32, ParamInit::zeros, in_, out_, {}});
  specs_.back().weight_decay = false;  // a bias: weight decay would only pull it to zero
}

Linear::Linear(const Linear& whole, TensorParallelRole role, TensorSlice slice)
    : name_(whole.name_),
      in_(whole.in_),
      out_(whole.out_),
      compute_(whole.compute_),
      specs_(whole.specs_),
      sliced_(true) {
  auto& weight = specs_[0];
  auto& bias = specs_[1];
  if (role == TensorParallelRole::column) {
    // The rows of W are the output features: W and b are cut by rows alike.
    const auto [begin, end] = slice.range_of(out_);
    weight.slice = {0, begin, end, weight.shape};
    bias.slice = {0, begin, end, bias.shape};
    out_ = end - begin;
    weight.shape = {out_, in_};
    bias.shape = {out_};
  } else {
    const auto [begin, end] = slice.range_of(in_);
    weight.slice = {1, begin, end, weight.shape};
    in_ = end - begin;
    weight.shape = {out_, in_};
    adds_bias_ = slice.rank == 0;
  }
}

std::unique_ptr<Layer> Linear::do_sliced(TensorParallelRole role, TensorSlice slice) const {
  // One Linear is half a pair; it has no vocabulary table (the gpt head splits by vocabulary).
  if (role != TensorParallelRole::column && role != TensorParallelRole::row) return nullptr;
  TESSERA_CHECK(!sliced_, name_ + ": is already a slice; slice the whole layer");
  const std::size_t extent = role == TensorParallelRole::column ? out_ : in_;
  if (static_cast<std::size_t>(slice.size) > extent) {
    throw InvalidArgument(name_ + ": cannot split its " + std::to_string(extent) + " " +
                          (role == TensorParallelRole::column ? "output" : "input") +
                          " features over " + std::to_string(slice.size) +
                          " tensor ranks; use a tensor size of at most " + std::to_string(extent));
  }
  return std::unique_ptr<Layer>(new Linear(*this, role, slice));
}

std::vector<ParamSpec> Linear::parameters() const {
  return specs_;
}

Shape Linear::output_shape(const Shape& input) const {
  TESSERA_CHECK(!input.empty(), name_ + ": input needs a batch dimension");
  return {input[0], out_};
}

Tensor Linear::forward(const Tensor& input, std::span<const BufferView> params,
                       LayerContext& ctx) const {
  const Device device = compute_device(name_, input);
  check_views(name_, params, specs_, "parameter", device);
  const std::size_t n = rows_of(name_, input, in_);
  const auto* w = static_cast<const float*>(params[0].data);
  const auto* b = static_cast<const float*>(params[1].data);
  if (device != Device::cpu()) {
    Tensor output = device::linear_forward(input, w, b, in_, out_, adds_bias_);
    ctx.save(input.alias());
    return output;
  }
  Tensor output({n, out_}, DType::f32);
  float* y = output.as<float>().data();
  // Start y at the bias and let sgemm add x W^T (beta = 1): one pass over y instead of two.
  if (adds_bias_) {
    compute_->parallel_for(n, std::max<std::size_t>(1, kParallelGrain / out_),
                           [&](std::size_t r0, std::size_t r1) {
                             for (std::size_t r = r0; r < r1; ++r) {
                               std::copy_n(b, out_, y + r * out_);
                             }
                           });
  }
  if (n > 0) {
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, blas_int(n), blas_int(out_), blas_int(in_),
                1.0F, input.as<float>().data(), blas_int(in_), w, blas_int(in_),
                adds_bias_ ? 1.0F : 0.0F, y, blas_int(out_));
  }
  ctx.save(input.alias());
  return output;
}

Tensor Linear::backward(const Tensor& grad_output, std::span<const BufferView> params,
                        std::span<const BufferView> grads, LayerContext& ctx) const {
  const Tensor& input = ctx.saved(0);
  const Device device = compute_device(name_, input);
  check_views(name_, params, specs_, "parameter", device);
  check_views(name_, grads, specs_, "gradient", device);
  check_same_device(name_, "the output gradient", grad_output, device);
  const std::size_t n = rows_of(name_, input, in_);
  TESSERA_CHECK(rows_of(name_ + " (grad)", grad_output, out_) == n,
                name_ + ": gradient rows do not match the saved input");
  auto* dw = static_cast<float*>(grads[0].data);
  auto* db = static_cast<float*>(grads[1].data);
  if (device != Device::cpu()) {
    device::linear_backward_params(input, grad_output, dw, db, in_, out_);
    if (!ctx.input_gradient_needed()) return {};
    return device::linear_backward_input(grad_output, static_cast<const float*>(params[0].data),
                                         in_, out_);
  }
  const float* dy = grad_output.as<float>().data();
  const float* x = input.as<float>().data();
  if (n > 0) {
    cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, blas_int(out_), blas_int(in_), blas_int(n),
                1.0F, dy, blas_int(out_), x, blas_int(in_), 1.0F, dw, blas_int(in_));
  }
  // Each thread owns a block of columns and adds rows 0..n-1 in order: the same bits whatever
  // the split.
  compute_->parallel_for(out_,
                         std::max<std::size_t>(64, kParallelGrain / std::max<std::size_t>(n, 1)),
                         [&](std::size_t c0, std::size_t c1) {
                           for (std::size_t r = 0; r < n; ++r) {
                             const float* row = dy + r * out_;
                             for (std::size_t c = c0; c < c1; ++c) db[c] += row[c];
                           }
                         });
  if (!ctx.input_gradient_needed()) return {};
  Tensor grad_input({n, in_}, DType::f32);
  if (n > 0) {
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, blas_int(n), blas_int(in_),
                blas_int(out_), 1.0F, dy, blas_int(out_), static_cast<const float*>(params[0].data),
                blas_int(in_), 0.0F, grad_input.as<float>().data(), blas_int(in_));
  }
  return grad_input;
}

}  // namespace tessera::layers
