#include "attention_lm.hpp"

#include <cmath>
#include <cstring>
#include <string>
#include <utility>

#include "layers/causal_attention.hpp"
#include "layers/embedding.hpp"
#include "layers/layer_norm.hpp"
#include "layers/param_specs.hpp"
#include "layers/softmax_cross_entropy.hpp"
#include "tessera/base/error.hpp"

namespace attention_lm {

using tessera::BufferView;
using tessera::DType;
using tessera::LayerContext;
using tessera::ParamInit;
using tessera::ParamSpec;
using tessera::Shape;
using tessera::Tensor;
namespace layers = tessera::layers;

namespace {

constexpr float kInitStd = 0.02F;  // GPT-2's

// A parameter's or gradient's elements (host memory: the kit computes there).
std::span<const float> in(const BufferView& view) {
  return view.host_span<float>("attention_lm");
}
std::span<float> out(const BufferView& view) {
  return view.host_span<float>("attention_lm");
}

// The batch and time of [n, T, width] activations, checked with a message naming the layer.
struct Sequence {
  std::size_t batch = 0;
  std::size_t time = 0;
  [[nodiscard]] std::size_t rows() const noexcept { return batch * time; }
};

Sequence sequence_of(const std::string& layer, const Tensor& x, const LmShape& shape) {
  const Shape& s = x.shape();
  if (x.dtype() != DType::f32 || s.size() != 3 || s[2] != shape.width || s[1] < 1 ||
      s[1] > shape.context) {
    throw tessera::InvalidArgument(
        layer + ": expects f32 activations [n, T <= " + std::to_string(shape.context) + ", " +
        std::to_string(shape.width) + "], got " + tessera::shape_text(s));
  }
  return {s[0], s[1]};
}

// Layer norm over the last dimension, with the statistics its backward needs.
struct Normed {
  Tensor out, mean, rstd;
};

Normed layer_norm(const Tensor& x, std::size_t rows, std::size_t width, std::span<const float> w,
                  std::span<const float> b, const tessera::layers::ComputeContext& compute) {
  Normed n{Tensor(x.shape(), DType::f32), Tensor({rows}, DType::f32), Tensor({rows}, DType::f32)};
  tessera::layers::layer_norm_forward<float>(n.out.as<float>(), n.mean.as<float>(),
                                             n.rstd.as<float>(), x.as<float>(), w, b, rows, width,
                                             compute);
  return n;
}

// A Linear used inside a composite layer: the composite keeps the inputs its backward needs, so
// each call gets a context of its own.
Tensor linear_forward(const tessera::layers::Linear& linear, const Tensor& input,
                      std::span<const BufferView> params) {
  LayerContext unused;
  return linear.forward(input, params, unused);
}

Tensor linear_backward(const tessera::layers::Linear& linear, const Tensor& grad_output,
                       const Tensor& saved_input, std::span<const BufferView> params,
                       std::span<const BufferView> grads) {
  LayerContext ctx;
  ctx.save(saved_input.alias());
  return linear.backward(grad_output, params, grads, ctx);
}

}  // namespace

// --- TokenEmbedding ----------------------------------------------------------------------------

TokenEmbedding::TokenEmbedding(const LmShape& shape,
                               std::shared_ptr<const tessera::layers::ComputeContext> compute)
    : shape_(shape), compute_(std::move(compute)) {}

std::vector<ParamSpec> TokenEmbedding::parameters() const {
  // Lookup tables: not decayed (layers/param_specs.hpp has the rule).
  return {layers::table_parameter("wte", {shape_.vocab, shape_.width}, kInitStd),
          layers::table_parameter("wpe", {shape_.context, shape_.width}, kInitStd)};
}

Shape TokenEmbedding::output_shape(const Shape& input) const {
  if (input.size() != 2) throw tessera::InvalidArgument("embedding: input needs [n, T] token ids");
  return {input[0], input[1], shape_.width};
}

Tensor TokenEmbedding::forward(const Tensor& input, std::span<const BufferView> params,
                               LayerContext& ctx) const {
  const Shape& s = input.shape();
  if (input.dtype() != DType::i64 || s.size() != 2 || s[1] < 1 || s[1] > shape_.context) {
    throw tessera::InvalidArgument(
        "embedding: expects i64 token ids [n, T <= " + std::to_string(shape_.context) + "], got " +
        tessera::shape_text(s));
  }
  Tensor result({s[0], s[1], shape_.width}, DType::f32);
  tessera::layers::embedding_forward<float>(
      result.as<float>(), input.as<std::int64_t>(), in(params[0]), in(params[1]),
      {s[0], s[1], shape_.width, shape_.vocab, shape_.context}, *compute_);
  ctx.save(input.alias());
  return result;
}

Tensor TokenEmbedding::backward(const Tensor& grad_output, std::span<const BufferView> /*params*/,
                                std::span<const BufferView> grads, LayerContext& ctx) const {
  const Tensor& tokens = ctx.saved(0);
  const Shape& s = tokens.shape();
  tessera::layers::embedding_backward<float>(
      out(grads[0]), out(grads[1]), grad_output.as<float>(), tokens.as<std::int64_t>(),
      {s[0], s[1], shape_.width, shape_.vocab, shape_.context}, *compute_);
  return {};  // token ids have no gradient
}

// --- AttentionBlock ----------------------------------------------------------------------------

namespace {

// Where each parameter sits in a block's list, and what forward saves, in LayerContext order.
enum BlockParam : std::size_t { kLnWeight, kLnBias, kQkv, kProj = kQkv + 2 };
enum BlockSaved : std::size_t { kInput, kNormed, kMean, kRstd, kQkvOut, kAttention, kLogSumExp };

}  // namespace

AttentionBlock::AttentionBlock(std::size_t index, const LmShape& shape,
                               std::shared_ptr<const tessera::layers::ComputeContext> compute)
    : prefix_("b." + std::to_string(index) + "."),
      shape_(shape),
      compute_(std::move(compute)),
      qkv_(prefix_ + "qkv", shape.width, 3 * shape.width, compute_),
      proj_(prefix_ + "proj", shape.width, shape.width, compute_) {}

std::vector<ParamSpec> AttentionBlock::parameters() const {
  std::vector<ParamSpec> specs{
      layers::norm_parameter(prefix_ + "ln.weight", shape_.width, ParamInit::ones),
      layers::norm_parameter(prefix_ + "ln.bias", shape_.width, ParamInit::zeros)};
  // The Linear layers' own specs (weight, bias), the residual projection scaled as GPT-2 does.
  for (const auto* linear : {&qkv_, &proj_}) {
    auto linear_specs = linear->parameters();
    const float std_dev = linear == &proj_
                              ? kInitStd / std::sqrt(2.0F * static_cast<float>(shape_.blocks))
                              : kInitStd;
    linear_specs[0] =
        layers::matrix_parameter(linear_specs[0].name, linear_specs[0].shape, std_dev);
    specs.insert(specs.end(), linear_specs.begin(), linear_specs.end());
  }
  return specs;
}

Tensor AttentionBlock::forward(const Tensor& input, std::span<const BufferView> params,
                               LayerContext& ctx) const {
  const Sequence seq = sequence_of(name(), input, shape_);
  const std::size_t rows = seq.rows();
  const std::size_t c = shape_.width;

  Normed ln = layer_norm(input, rows, c, in(params[kLnWeight]), in(params[kLnBias]), *compute_);
  Tensor qkv = linear_forward(qkv_, ln.out.alias().reshaped({rows, c}), params.subspan(kQkv, 2));
  Tensor attention({rows, c}, DType::f32);
  Tensor lse({rows * shape_.heads}, DType::f32);
  tessera::layers::causal_attention_forward<float>(
      attention.as<float>(), lse.as<float>(), qkv.as<float>(),
      {seq.batch, seq.time, shape_.heads, c / shape_.heads}, *compute_);
  Tensor result =
      linear_forward(proj_, attention, params.subspan(kProj, 2)).reshaped({seq.batch, seq.time, c});
  const auto y = result.as<float>();
  const auto x = input.as<float>();
  for (std::size_t i = 0; i < y.size(); ++i) y[i] += x[i];  // the residual

  ctx.save(input.alias());
  ctx.save(std::move(ln.out));
  ctx.save(std::move(ln.mean));
  ctx.save(std::move(ln.rstd));
  ctx.save(std::move(qkv));
  ctx.save(std::move(attention));
  ctx.save(std::move(lse));
  return result;
}

Tensor AttentionBlock::backward(const Tensor& grad_output, std::span<const BufferView> params,
                                std::span<const BufferView> grads, LayerContext& ctx) const {
  const Tensor& input = ctx.saved(kInput);
  const Sequence seq = sequence_of(name(), input, shape_);
  const std::size_t rows = seq.rows();
  const std::size_t c = shape_.width;

  // The residual's identity path carries the output gradient through unchanged; the branch adds
  // its own (layer_norm_backward adds into its input gradient).
  Tensor dx(input.shape(), DType::f32);
  std::memcpy(dx.view().data, grad_output.view().data, grad_output.bytes());
  const Tensor grad_attention =
      linear_backward(proj_, grad_output.alias().reshaped({rows, c}), ctx.saved(kAttention),
                      params.subspan(kProj, 2), grads.subspan(kProj, 2));
  Tensor grad_qkv(ctx.saved(kQkvOut).shape(), DType::f32);
  tessera::layers::causal_attention_backward<float>(
      grad_qkv.as<float>(), grad_attention.as<float>(), ctx.saved(kQkvOut).as<float>(),
      ctx.saved(kAttention).as<float>(), ctx.saved(kLogSumExp).as<float>(),
      {seq.batch, seq.time, shape_.heads, c / shape_.heads}, *compute_);
  const Tensor grad_ln =
      linear_backward(qkv_, grad_qkv, ctx.saved(kNormed).alias().reshaped({rows, c}),
                      params.subspan(kQkv, 2), grads.subspan(kQkv, 2));
  tessera::layers::layer_norm_backward<float>(
      dx.as<float>(), out(grads[kLnWeight]), out(grads[kLnBias]), grad_ln.as<float>(),
      input.as<float>(), in(params[kLnWeight]), ctx.saved(kMean).as<float>(),
      ctx.saved(kRstd).as<float>(), rows, c, *compute_);
  return dx;
}

// --- Head --------------------------------------------------------------------------------------

Head::Head(const LmShape& shape, std::shared_ptr<const tessera::layers::ComputeContext> compute)
    : shape_(shape),
      compute_(std::move(compute)),
      linear_("head", shape.width, shape.vocab, compute_) {}

std::vector<ParamSpec> Head::parameters() const {
  std::vector<ParamSpec> specs{layers::norm_parameter("ln_f.weight", shape_.width, ParamInit::ones),
                               layers::norm_parameter("ln_f.bias", shape_.width, ParamInit::zeros)};
  auto linear_specs = linear_.parameters();
  linear_specs[0] = layers::matrix_parameter(linear_specs[0].name, linear_specs[0].shape, kInitStd);
  specs.insert(specs.end(), linear_specs.begin(), linear_specs.end());
  return specs;
}

Shape Head::output_shape(const Shape& input) const {
  if (input.size() != 3) throw tessera::InvalidArgument("head: input needs [n, T, width]");
  return {input[0], input[1], shape_.vocab};
}

Tensor Head::forward(const Tensor& input, std::span<const BufferView> params,
                     LayerContext& ctx) const {
  const Sequence seq = sequence_of(name(), input, shape_);
  const std::size_t rows = seq.rows();
  Normed ln = layer_norm(input, rows, shape_.width, in(params[0]), in(params[1]), *compute_);
  Tensor logits =
      linear_forward(linear_, ln.out.alias().reshaped({rows, shape_.width}), params.subspan(2, 2));
  ctx.save(input.alias());
  ctx.save(std::move(ln.out));
  ctx.save(std::move(ln.mean));
  ctx.save(std::move(ln.rstd));
  return std::move(logits).reshaped({seq.batch, seq.time, shape_.vocab});
}

Tensor Head::backward(const Tensor& grad_output, std::span<const BufferView> params,
                      std::span<const BufferView> grads, LayerContext& ctx) const {
  const Tensor& input = ctx.saved(0);
  const Sequence seq = sequence_of(name(), input, shape_);
  const std::size_t rows = seq.rows();
  const Tensor grad_ln =
      linear_backward(linear_, grad_output.alias().reshaped({rows, shape_.vocab}),
                      ctx.saved(1).alias().reshaped({rows, shape_.width}), params.subspan(2, 2),
                      grads.subspan(2, 2));
  Tensor dx(input.shape(), DType::f32);  // zeros: layer_norm_backward adds into it
  tessera::layers::layer_norm_backward<float>(dx.as<float>(), out(grads[0]), out(grads[1]),
                                              grad_ln.as<float>(), input.as<float>(), in(params[0]),
                                              ctx.saved(2).as<float>(), ctx.saved(3).as<float>(),
                                              rows, shape_.width, *compute_);
  return dx;
}

// --- AttentionLm -------------------------------------------------------------------------------

namespace {

std::size_t positive(const tessera::Options& options, const char* key) {
  const std::int64_t value = options.get_int(key);
  if (value < 1) {
    throw tessera::ConfigError(std::string("model.attention_lm.") + key + ": " +
                               std::to_string(value) + " is not a positive integer");
  }
  return static_cast<std::size_t>(value);
}

LmShape shape_from(const tessera::Options& options) {
  const LmShape shape{positive(options, "blocks"), positive(options, "heads"),
                      positive(options, "width"), positive(options, "context"),
                      positive(options, "vocab")};
  if (shape.width % shape.heads != 0) {
    throw tessera::ConfigError("model.attention_lm.width: " + std::to_string(shape.width) +
                               " is not a multiple of heads = " + std::to_string(shape.heads));
  }
  return shape;
}

}  // namespace

AttentionLm::AttentionLm(const tessera::Options& options)
    : shape_(shape_from(options)),
      compute_(std::make_shared<tessera::layers::ComputeContext>(
          static_cast<int>(positive(options, "threads")))) {
  tessera::layers::set_blas_threads(static_cast<int>(positive(options, "threads")));
  layers_.push_back(std::make_unique<TokenEmbedding>(shape_, compute_));
  for (std::size_t b = 0; b < shape_.blocks; ++b) {
    layers_.push_back(std::make_unique<AttentionBlock>(b, shape_, compute_));
  }
  layers_.push_back(std::make_unique<Head>(shape_, compute_));
}

tessera::SampleLayout AttentionLm::layout() const {
  return {DType::i64, {shape_.context}, {shape_.context}, shape_.vocab};
}

const tessera::Layer& AttentionLm::layer(std::size_t index) const {
  if (index >= layers_.size()) {
    throw tessera::InvalidArgument("attention_lm: layer " + std::to_string(index) + " of " +
                                   std::to_string(layers_.size()));
  }
  return *layers_[index];
}

tessera::LossResult AttentionLm::loss(const Tensor& logits, const Tensor& targets) const {
  return tessera::layers::softmax_cross_entropy(logits, targets, shape_.vocab, *compute_);
}

}  // namespace attention_lm
