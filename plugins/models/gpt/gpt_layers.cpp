#include "gpt/gpt_layers.hpp"

#include <cblas.h>

#include <cmath>
#include <cstring>
#include <optional>
#include <utility>

#include "layers/causal_attention.hpp"
#include "layers/dropout.hpp"
#include "layers/embedding.hpp"
#include "layers/gelu.hpp"
#include "layers/layer_checks.hpp"
#include "layers/layer_norm.hpp"
#include "layers/param_specs.hpp"
#include "tessera/base/error.hpp"
#include "tessera/base/trace.hpp"

namespace tessera::gpt {
namespace {

using layers::check_views;

std::span<const float> values(const BufferView& view, const char* what) {
  return view.host_span<float>(what);
}

std::span<float> values_of(const BufferView& view, const char* what) {
  return view.host_span<float>(what);
}

std::span<const float> values(const Tensor& t) {
  return t.as<float>();
}

std::span<const std::int64_t> tokens_of(const Tensor& t) {
  return t.as<std::int64_t>();
}

// The batch and time of [n, T, width] activations on the host, checked.
struct Sequence {
  std::size_t batch = 0;
  std::size_t time = 0;
  [[nodiscard]] std::size_t rows() const noexcept { return batch * time; }
};

Sequence sequence_of(const std::string& layer, const Tensor& x, std::size_t width,
                     std::size_t context) {
  if (x.device() != Device::cpu()) {
    throw InvalidArgument(layer + ": the gpt layers compute in host memory only, the input is on " +
                          to_string(x.device()) +
                          "; train the gpt model with [runtime] device = cpu");
  }
  const Shape& s = x.shape();
  TESSERA_CHECK(
      x.dtype() == DType::f32 && s.size() == 3 && s[2] == width && s[1] >= 1 && s[1] <= context,
      layer + ": expects f32 activations [n, T <= " + std::to_string(context) + ", " +
          std::to_string(width) + "], got " + std::string(dtype_name(x.dtype())) + " " +
          shape_text(s));
  return {s[0], s[1]};
}

// [rows, width] reading of [n, T, width] activations (no copy), for the Linear layers.
Tensor as_matrix(const Tensor& x, std::size_t rows, std::size_t width) {
  return x.alias().reshaped({rows, width});
}

Tensor as_sequence(Tensor m, const Sequence& seq) {
  const std::size_t width = m.count() / std::max<std::size_t>(seq.rows(), 1);
  return std::move(m).reshaped({seq.batch, seq.time, width});
}

// Layer norm over the last dimension: out, and the per-row statistics backward needs.
struct Normed {
  Tensor out, mean, rstd;
};

Normed layer_norm(const Tensor& x, std::size_t rows, std::size_t width, std::span<const float> w,
                  std::span<const float> b, const layers::ComputeContext& compute) {
  Normed n{Tensor(x.shape(), DType::f32), Tensor({rows}, DType::f32), Tensor({rows}, DType::f32)};
  layers::layer_norm_forward<float>(n.out.as<float>(), n.mean.as<float>(), n.rstd.as<float>(),
                                    values(x), w, b, rows, width, compute);
  return n;
}

// A Linear's backward from the input its forward saw (the block keeps its own activations).
Tensor linear_backward(const Layer& linear, const Tensor& grad_output, const Tensor& saved_input,
                       std::span<const BufferView> params, std::span<const BufferView> grads) {
  LayerContext ctx;
  ctx.save(saved_input.alias());
  return linear.backward(grad_output, params, grads, ctx);
}

Tensor linear_forward(const Layer& linear, const Tensor& input,
                      std::span<const BufferView> params) {
  LayerContext unused;  // the block saves the input itself
  return linear.forward(input, params, unused);
}

int blas_int(std::size_t v) {
  return static_cast<int>(v);
}

// The layer's ParamSpecs under the model's weight-decay rule: nanoGPT's, as the specs were made,
// or every parameter with shape.decay_all.
std::vector<ParamSpec> with_decay_rule(std::vector<ParamSpec> specs, const GptShape& shape) {
  if (shape.decay_all) {
    for (auto& spec : specs) spec.weight_decay = true;
  }
  return specs;
}

// The mask of dropout site `site` in this call: drawn only in a training forward (the runner set
// ctx.training()) at a rate above 0; nullopt leaves the values untouched, bit for bit. Element 0
// of the call is element first_sample * elements_per_sample of the site's global activation.
std::optional<layers::DropoutKey> dropout_key(const LayerContext& ctx, float rate, std::size_t site,
                                              std::size_t elements_per_sample) {
  const auto& draw = ctx.training();
  if (!draw || rate == 0.0F) return std::nullopt;
  return layers::DropoutKey{draw->seed, draw->step, site, draw->first_sample * elements_per_sample};
}

void dropout_in_place(const Tensor& x, float rate, const std::optional<layers::DropoutKey>& key) {
  if (!key) return;
  const auto v = x.as<float>();
  layers::dropout_forward<float>(v, v, rate, *key);
}

// The gradient at a dropout's input from the one at its output: the same mask, drawn again.
Tensor dropout_gradient(const Tensor& grad_output, float rate,
                        const std::optional<layers::DropoutKey>& key) {
  if (!key) return grad_output.alias();
  Tensor grad_input(grad_output.shape(), DType::f32);  // zero-filled: the kernel adds into it
  layers::dropout_backward<float>(grad_input.as<float>(), values(grad_output), rate, *key);
  return grad_input;
}

// The rows tensor rank `slice` holds of the vocabulary, for `layer` split by vocabulary. Throws
// InvalidArgument for a layer that is a slice already and for more tensor ranks than tokens.
VocabularyRows vocabulary_rows(const std::string& layer, const VocabularyRows& current,
                               const GptShape& shape, TensorSlice slice) {
  TESSERA_CHECK(!current.sliced, layer + ": is already a slice; slice the whole layer");
  const auto [first, last] = slice.range_of(shape.vocab);
  return {first, last - first, true};
}

// A [vocab, width] table's spec as the holder of `rows` has it: those rows of the whole.
ParamSpec rows_of(ParamSpec spec, const VocabularyRows& rows) {
  if (!rows.sliced) return spec;
  spec.slice = {0, rows.first, rows.first + rows.count, spec.shape};
  spec.shape[0] = rows.count;
  return spec;
}

}  // namespace

// --- Embedding ---------------------------------------------------------------------------------

Embedding::Embedding(const GptShape& shape, std::shared_ptr<const layers::ComputeContext> compute)
    : shape_(shape), compute_(std::move(compute)), rows_{0, shape.vocab, false} {}

std::vector<ParamSpec> Embedding::parameters() const {
  return with_decay_rule(
      {rows_of(layers::table_parameter("wte", {shape_.vocab, shape_.width}, kInitStd), rows_),
       layers::table_parameter("wpe", {shape_.context, shape_.width}, kInitStd)},
      shape_);
}

std::unique_ptr<Layer> Embedding::do_sliced(TensorParallelRole role, TensorSlice slice) const {
  if (role != TensorParallelRole::vocabulary) return nullptr;
  auto part = std::make_unique<Embedding>(*this);
  part->rows_ = vocabulary_rows(name(), rows_, shape_, slice);
  return part;
}

layers::EmbeddingShape Embedding::kernel_shape(const Shape& tokens) const {
  return {tokens[0],
          tokens[1],
          shape_.width,
          shape_.vocab,
          shape_.context,
          rows_.first,
          rows_.sliced ? rows_.count : 0};
}

Shape Embedding::output_shape(const Shape& input) const {
  TESSERA_CHECK(input.size() == 2, "embedding: input needs [n, T] token ids");
  return {input[0], input[1], shape_.width};
}

Tensor Embedding::forward(const Tensor& input, std::span<const BufferView> params,
                          LayerContext& ctx) const {
  const Shape& s = input.shape();
  if (input.device() != Device::cpu()) {
    throw InvalidArgument(
        "embedding: the gpt layers compute in host memory only; train the gpt "
        "model with [runtime] device = cpu");
  }
  TESSERA_CHECK(input.dtype() == DType::i64 && s.size() == 2 && s[1] >= 1 && s[1] <= shape_.context,
                "embedding: expects i64 token ids [n, T <= " + std::to_string(shape_.context) +
                    "], got " + std::string(dtype_name(input.dtype())) + " " + shape_text(s));
  check_views(name(), params, parameters(), "parameter", Device::cpu());
  Tensor out({s[0], s[1], shape_.width}, DType::f32);
  const layers::EmbeddingShape shape = kernel_shape(s);
  if (!rows_.sliced) {
    layers::embedding_forward<float>(out.as<float>(), tokens_of(input), values(params[0], "wte"),
                                     values(params[1], "wpe"), shape, *compute_);
  } else {
    // This rank's rows' lookups, summed over the tensor group before wpe joins them once.
    layers::token_embedding_forward<float>(out.as<float>(), tokens_of(input),
                                           values(params[0], "wte"), shape, *compute_);
    ctx.sum_over_tensor_group(out);
    layers::add_position_embedding<float>(out.as<float>(), values(params[1], "wpe"), shape,
                                          *compute_);
  }
  dropout_in_place(out, shape_.dropout, dropout_key(ctx, shape_.dropout, 0, s[1] * shape_.width));
  ctx.save(input.alias());
  return out;
}

Tensor Embedding::backward(const Tensor& grad_output, std::span<const BufferView> /*params*/,
                           std::span<const BufferView> grads, LayerContext& ctx) const {
  const Tensor& tokens = ctx.saved(0);
  const Shape& s = tokens.shape();
  check_views(name(), grads, parameters(), "gradient", Device::cpu());
  const Tensor grad_sum = dropout_gradient(
      grad_output, shape_.dropout, dropout_key(ctx, shape_.dropout, 0, s[1] * shape_.width));
  layers::embedding_backward<float>(values_of(grads[0], "wte"), values_of(grads[1], "wpe"),
                                    values(grad_sum), tokens_of(tokens), kernel_shape(s),
                                    *compute_);
  return {};  // token ids have no gradient
}

// --- Block -------------------------------------------------------------------------------------

namespace {

// Where each parameter sits in a block's list.
enum BlockParam : std::size_t {
  kLn1Weight,
  kLn1Bias,
  kQkv,
  kAttnProj = kQkv + 2,
  kLn2Weight = kAttnProj + 2,
  kLn2Bias,
  kFc,
  kMlpProj = kFc + 2,
  kBlockParams = kMlpProj + 2
};

// What a block's forward keeps for its backward, in LayerContext order.
enum BlockSaved : std::size_t {
  kInput,
  kLn1,
  kLn1Mean,
  kLn1Rstd,
  kQkvOut,
  kAttention,
  kLogSumExp,
  kMid,
  kLn2,
  kLn2Mean,
  kLn2Rstd,
  kFcOut,
  kGelu
};

void add_into(const Tensor& target, const Tensor& addend) {
  const auto t = target.as<float>();
  const auto a = addend.as<float>();
  for (std::size_t i = 0; i < t.size(); ++i) t[i] += a[i];
}

}  // namespace

Block::Block(std::size_t index, const GptShape& shape,
             std::shared_ptr<const layers::ComputeContext> compute)
    : prefix_("h." + std::to_string(index) + "."),
      shape_(shape),
      compute_(std::move(compute)),
      index_(index),
      heads_(shape.heads),
      head_width_(shape.width / shape.heads),
      qkv_(std::make_unique<layers::Linear>(prefix_ + "attn.c_attn", shape.width, 3 * shape.width,
                                            compute_)),
      attn_proj_(std::make_unique<layers::Linear>(prefix_ + "attn.c_proj", shape.width, shape.width,
                                                  compute_)),
      fc_(std::make_unique<layers::Linear>(prefix_ + "mlp.c_fc", shape.width, 4 * shape.width,
                                           compute_)),
      mlp_proj_(std::make_unique<layers::Linear>(prefix_ + "mlp.c_proj", 4 * shape.width,
                                                 shape.width, compute_)) {
  const float residual_std =
      kInitStd / static_cast<float>(std::sqrt(2.0 * static_cast<double>(shape.layers)));
  const auto linear = [&](const Layer& l, float std_dev) {
    auto specs = l.parameters();
    specs[0] = layers::matrix_parameter(specs[0].name, specs[0].shape, std_dev);
    specs_.insert(specs_.end(), specs.begin(), specs.end());
  };
  const std::size_t c = shape.width;
  specs_.push_back(layers::norm_parameter(prefix_ + "ln_1.weight", c, ParamInit::ones));
  specs_.push_back(layers::norm_parameter(prefix_ + "ln_1.bias", c, ParamInit::zeros));
  linear(*qkv_, kInitStd);
  linear(*attn_proj_, residual_std);
  specs_.push_back(layers::norm_parameter(prefix_ + "ln_2.weight", c, ParamInit::ones));
  specs_.push_back(layers::norm_parameter(prefix_ + "ln_2.bias", c, ParamInit::zeros));
  linear(*fc_, kInitStd);
  linear(*mlp_proj_, residual_std);
  TESSERA_CHECK(specs_.size() == kBlockParams, "gpt block: parameter list out of order");
  specs_ = with_decay_rule(std::move(specs_), shape);
}

std::pair<std::optional<layers::DropoutKey>, std::optional<layers::DropoutKey>> Block::dropout_keys(
    const LayerContext& ctx, std::size_t time) const {
  const std::size_t first_site = 1 + kDropoutSitesPerBlock * index_;
  const std::size_t per_sample = time * shape_.width;
  return {dropout_key(ctx, shape_.dropout, first_site + 1, per_sample),
          dropout_key(ctx, shape_.dropout, first_site + 2, per_sample)};
}

layers::AttentionDropout Block::attention_dropout(const LayerContext& ctx, std::size_t time) const {
  const float rate = shape_.attention_rate();
  const std::size_t per_head = time * time;
  const auto key =
      dropout_key(ctx, rate, 1 + kDropoutSitesPerBlock * index_, shape_.heads * per_head);
  if (!key) return {};
  layers::AttentionDropout drop{rate, *key, shape_.heads};
  // A tensor rank's heads keep their global numbers: its head 0 is the block's first_head_.
  drop.key.first += first_head_ * per_head;
  return drop;
}

Block::Block(const Block& whole, TensorSlice slice)
    : prefix_(whole.prefix_),
      shape_(whole.shape_),
      compute_(whole.compute_),
      index_(whole.index_),
      head_width_(whole.head_width_),
      specs_(whole.specs_),
      sliced_(true) {
  const auto [h0, h1] = slice.range_of(shape_.heads);
  heads_ = h1 - h0;
  first_head_ = h0;
  const std::size_t c = shape_.width;
  // c_attn: this rank's heads of each of Q, K and V, rows [Q_heads; K_heads; V_heads], which is
  // the layout the attention reads. A Linear of that shape computes on them.
  qkv_ = std::make_unique<layers::Linear>(prefix_ + "attn.c_attn", c, 3 * heads_ * head_width_,
                                          compute_);
  for (std::size_t i = kQkv; i < kQkv + 2; ++i) {
    ParamSpec& spec = specs_[i];
    spec.slice = {0, h0 * head_width_, h1 * head_width_, spec.shape, 3};
    spec.shape[0] = 3 * heads_ * head_width_;
  }
  // The rest splits as a Linear does; with tp dividing the heads, attn.c_proj's input columns
  // [c h0 / heads, c h1 / heads) are exactly the heads' channels.
  const auto split = [&](const Layer& linear, TensorParallelRole role, std::size_t first_spec) {
    std::unique_ptr<const Layer> part = linear.sliced(role, slice);
    const auto part_specs = part->parameters();
    for (std::size_t i = 0; i < part_specs.size(); ++i) {
      specs_[first_spec + i].slice = part_specs[i].slice;
      specs_[first_spec + i].shape = part_specs[i].shape;
    }
    return part;
  };
  attn_proj_ = split(*whole.attn_proj_, TensorParallelRole::row, kAttnProj);
  fc_ = split(*whole.fc_, TensorParallelRole::column, kFc);
  mlp_proj_ = split(*whole.mlp_proj_, TensorParallelRole::row, kMlpProj);
}

std::unique_ptr<Layer> Block::do_sliced(TensorParallelRole role, TensorSlice slice) const {
  if (role != TensorParallelRole::pair) return nullptr;
  TESSERA_CHECK(!sliced_, name() + ": is already a slice; slice the whole block");
  // A size that divides the heads divides the width (heads x head width) and the MLP's 4 width,
  // so every rank holds an equal share of each split.
  const auto tp = static_cast<std::size_t>(slice.size);
  if (shape_.heads % tp != 0) {
    throw InvalidArgument(name() + ": a tensor size of " + std::to_string(tp) +
                          " does not divide its " + std::to_string(shape_.heads) +
                          " heads (each tensor rank computes whole heads); use a tensor size "
                          "that divides " +
                          std::to_string(shape_.heads));
  }
  return std::unique_ptr<Layer>(new Block(*this, slice));
}

Tensor Block::forward(const Tensor& input, std::span<const BufferView> params,
                      LayerContext& ctx) const {
  const Sequence seq = sequence_of(name(), input, shape_.width, shape_.context);
  check_views(name(), params, specs_, "parameter", Device::cpu());
  const std::size_t rows = seq.rows();
  const std::size_t c = shape_.width;
  const auto p = [&](std::size_t i) { return values(params[i], "gpt block parameter"); };
  const auto [attn_drop, mlp_drop] = dropout_keys(ctx, seq.time);

  Normed ln1 = layer_norm(input, rows, c, p(kLn1Weight), p(kLn1Bias), *compute_);
  Tensor qkv = linear_forward(*qkv_, as_matrix(ln1.out, rows, c), params.subspan(kQkv, 2));
  Tensor attention({rows, heads_ * head_width_}, DType::f32);
  Tensor lse({rows * heads_}, DType::f32);
  {
    // The part of a block that grows as T^2 (docs/tracing.md; tools/bench/gpt_scale.py).
    const trace::Span span("attention forward", "compute",
                           {{"time", static_cast<std::int64_t>(seq.time)}});
    layers::causal_attention_forward<float>(attention.as<float>(), lse.as<float>(), values(qkv),
                                            {seq.batch, seq.time, heads_, head_width_}, *compute_,
                                            attention_dropout(ctx, seq.time));
  }
  // Split over a tensor group, c_proj's product is this rank's part: the sum comes before the
  // residual, so the residual is added once.
  Tensor mid =
      as_sequence(linear_forward(*attn_proj_, attention, params.subspan(kAttnProj, 2)), seq);
  ctx.sum_over_tensor_group(mid);
  dropout_in_place(mid, shape_.dropout, attn_drop);
  add_into(mid, input);
  Normed ln2 = layer_norm(mid, rows, c, p(kLn2Weight), p(kLn2Bias), *compute_);
  Tensor fc = linear_forward(*fc_, as_matrix(ln2.out, rows, c), params.subspan(kFc, 2));
  Tensor gelu(fc.shape(), DType::f32);
  layers::gelu_forward<float>(gelu.as<float>(), values(fc), *compute_);
  Tensor out = as_sequence(linear_forward(*mlp_proj_, gelu, params.subspan(kMlpProj, 2)), seq);
  ctx.sum_over_tensor_group(out);
  dropout_in_place(out, shape_.dropout, mlp_drop);
  add_into(out, mid);

  ctx.save(input.alias());
  ctx.save(std::move(ln1.out));
  ctx.save(std::move(ln1.mean));
  ctx.save(std::move(ln1.rstd));
  ctx.save(std::move(qkv));
  ctx.save(std::move(attention));
  ctx.save(std::move(lse));
  ctx.save(std::move(mid));
  ctx.save(std::move(ln2.out));
  ctx.save(std::move(ln2.mean));
  ctx.save(std::move(ln2.rstd));
  ctx.save(std::move(fc));
  ctx.save(std::move(gelu));
  return out;
}

Tensor Block::backward(const Tensor& grad_output, std::span<const BufferView> params,
                       std::span<const BufferView> grads, LayerContext& ctx) const {
  const Tensor& input = ctx.saved(kInput);
  const Sequence seq = sequence_of(name(), input, shape_.width, shape_.context);
  check_views(name(), params, specs_, "parameter", Device::cpu());
  check_views(name(), grads, specs_, "gradient", Device::cpu());
  TESSERA_CHECK(grad_output.shape() == input.shape(),
                name() + ": the output gradient's shape differs from the input's");
  const std::size_t rows = seq.rows();
  const std::size_t c = shape_.width;
  const auto p = [&](std::size_t i) { return values(params[i], "gpt block parameter"); };
  const auto g = [&](std::size_t i) { return values_of(grads[i], "gpt block gradient"); };
  const auto saved = [&](std::size_t i) -> const Tensor& { return ctx.saved(i); };
  const auto [attn_drop, mlp_drop] = dropout_keys(ctx, seq.time);

  // `dx` is the residual stream's gradient from the top down: the identity paths carry it
  // through, each branch adds its own (layer_norm_backward adds into its input gradient).
  Tensor dx(input.shape(), DType::f32);
  std::memcpy(dx.view().data, grad_output.view().data, grad_output.bytes());

  // MLP branch: out = mid + mlp_proj(gelu(fc(ln_2(mid)))).
  const Tensor grad_gelu = linear_backward(
      *mlp_proj_, as_matrix(dropout_gradient(dx, shape_.dropout, mlp_drop), rows, c), saved(kGelu),
      params.subspan(kMlpProj, 2), grads.subspan(kMlpProj, 2));
  Tensor grad_fc(saved(kFcOut).shape(), DType::f32);
  layers::gelu_backward<float>(grad_fc.as<float>(), values(grad_gelu), values(saved(kFcOut)),
                               *compute_);
  // Split, each rank's c_fc gives its features' part of ln_2's output gradient: summed first,
  // so ln_2's gradients and dx are the same on every tensor rank.
  Tensor grad_ln2 = linear_backward(*fc_, grad_fc, as_matrix(saved(kLn2), rows, c),
                                    params.subspan(kFc, 2), grads.subspan(kFc, 2));
  ctx.sum_over_tensor_group(grad_ln2);
  layers::layer_norm_backward<float>(dx.as<float>(), g(kLn2Weight), g(kLn2Bias), values(grad_ln2),
                                     values(saved(kMid)), p(kLn2Weight), values(saved(kLn2Mean)),
                                     values(saved(kLn2Rstd)), rows, c, *compute_);
  // Attention branch: mid = input + attn_proj(attention(qkv(ln_1(input)))).
  const Tensor grad_attention = linear_backward(
      *attn_proj_, as_matrix(dropout_gradient(dx, shape_.dropout, attn_drop), rows, c),
      saved(kAttention), params.subspan(kAttnProj, 2), grads.subspan(kAttnProj, 2));
  Tensor grad_qkv(saved(kQkvOut).shape(), DType::f32);
  {
    const trace::Span span("attention backward", "compute",
                           {{"time", static_cast<std::int64_t>(seq.time)}});
    layers::causal_attention_backward<float>(
        grad_qkv.as<float>(), values(grad_attention), values(saved(kQkvOut)),
        values(saved(kAttention)), values(saved(kLogSumExp)),
        {seq.batch, seq.time, heads_, head_width_}, *compute_, attention_dropout(ctx, seq.time));
  }
  Tensor grad_ln1 = linear_backward(*qkv_, grad_qkv, as_matrix(saved(kLn1), rows, c),
                                    params.subspan(kQkv, 2), grads.subspan(kQkv, 2));
  ctx.sum_over_tensor_group(grad_ln1);
  layers::layer_norm_backward<float>(dx.as<float>(), g(kLn1Weight), g(kLn1Bias), values(grad_ln1),
                                     values(input), p(kLn1Weight), values(saved(kLn1Mean)),
                                     values(saved(kLn1Rstd)), rows, c, *compute_);
  return dx;
}

// --- Final norm --------------------------------------------------------------------------------

FinalNorm::FinalNorm(const GptShape& shape, std::shared_ptr<const layers::ComputeContext> compute)
    : shape_(shape), compute_(std::move(compute)) {}

std::vector<ParamSpec> FinalNorm::parameters() const {
  return with_decay_rule({layers::norm_parameter("ln_f.weight", shape_.width, ParamInit::ones),
                          layers::norm_parameter("ln_f.bias", shape_.width, ParamInit::zeros)},
                         shape_);
}

Tensor FinalNorm::forward(const Tensor& input, std::span<const BufferView> params,
                          LayerContext& ctx) const {
  const Sequence seq = sequence_of(name(), input, shape_.width, shape_.context);
  check_views(name(), params, parameters(), "parameter", Device::cpu());
  Normed n = layer_norm(input, seq.rows(), shape_.width, values(params[0], "ln_f.weight"),
                        values(params[1], "ln_f.bias"), *compute_);
  ctx.save(input.alias());
  ctx.save(std::move(n.mean));
  ctx.save(std::move(n.rstd));
  return std::move(n.out);
}

Tensor FinalNorm::backward(const Tensor& grad_output, std::span<const BufferView> params,
                           std::span<const BufferView> grads, LayerContext& ctx) const {
  const Tensor& input = ctx.saved(0);
  const Sequence seq = sequence_of(name(), input, shape_.width, shape_.context);
  check_views(name(), grads, parameters(), "gradient", Device::cpu());
  Tensor dx(input.shape(), DType::f32);
  layers::layer_norm_backward<float>(
      dx.as<float>(), values_of(grads[0], "ln_f.weight"), values_of(grads[1], "ln_f.bias"),
      values(grad_output), values(input), values(params[0], "ln_f.weight"), values(ctx.saved(1)),
      values(ctx.saved(2)), seq.rows(), shape_.width, *compute_);
  return dx;
}

// --- Head --------------------------------------------------------------------------------------

Head::Head(const GptShape& shape, std::shared_ptr<const layers::ComputeContext> compute)
    : shape_(shape), compute_(std::move(compute)), rows_{0, shape.vocab, false} {}

std::vector<ParamSpec> Head::parameters() const {
  ParamSpec weight = rows_of(
      layers::matrix_parameter("lm_head.weight", {shape_.vocab, shape_.width}, kInitStd), rows_);
  if (shape_.tie_embeddings) weight.tied_to = "wte";
  return {weight};
}

std::unique_ptr<Layer> Head::do_sliced(TensorParallelRole role, TensorSlice slice) const {
  if (role != TensorParallelRole::vocabulary) return nullptr;
  auto part = std::make_unique<Head>(*this);
  part->rows_ = vocabulary_rows(name(), rows_, shape_, slice);
  return part;
}

Shape Head::output_shape(const Shape& input) const {
  TESSERA_CHECK(input.size() == 3, "lm_head: input needs [n, T, width]");
  return {input[0], input[1], rows_.count};
}

Tensor Head::forward(const Tensor& input, std::span<const BufferView> params,
                     LayerContext& ctx) const {
  const Sequence seq = sequence_of(name(), input, shape_.width, shape_.context);
  check_views(name(), params, parameters(), "parameter", Device::cpu());
  // Split by vocabulary, only this rank's classes: [n, T, vocab] is never formed.
  Tensor logits({seq.batch, seq.time, rows_.count}, DType::f32, compute_->large_buffers());
  const std::size_t rows = seq.rows();
  if (rows > 0) {
    // logits [rows, classes] = x [rows, width] . W^T
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, blas_int(rows), blas_int(rows_.count),
                blas_int(shape_.width), 1.0F, values(input).data(), blas_int(shape_.width),
                values(params[0], "lm_head.weight").data(), blas_int(shape_.width), 0.0F,
                logits.as<float>().data(), blas_int(rows_.count));
  }
  ctx.save(input.alias());
  return logits;
}

Tensor Head::backward(const Tensor& grad_output, std::span<const BufferView> params,
                      std::span<const BufferView> grads, LayerContext& ctx) const {
  const Tensor& input = ctx.saved(0);
  const Sequence seq = sequence_of(name(), input, shape_.width, shape_.context);
  check_views(name(), grads, parameters(), "gradient", Device::cpu());
  TESSERA_CHECK(grad_output.count() == seq.rows() * rows_.count,
                "lm_head: the logits' gradient does not match the saved input");
  const std::size_t rows = seq.rows();
  const int v = blas_int(rows_.count);
  const int c = blas_int(shape_.width);
  const float* dy = values(grad_output).data();
  if (rows > 0) {
    // dW [classes, width] += dy^T [classes, rows] . x [rows, width]
    cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, v, c, blas_int(rows), 1.0F, dy, v,
                values(input).data(), c, 1.0F, values_of(grads[0], "lm_head.weight").data(), c);
  }
  if (!ctx.input_gradient_needed()) return {};
  Tensor dx(input.shape(), DType::f32);
  if (rows > 0) {
    // dx [rows, width] = dy [rows, classes] . W [classes, width]
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, blas_int(rows), c, v, 1.0F, dy, v,
                values(params[0], "lm_head.weight").data(), c, 0.0F, dx.as<float>().data(), c);
  }
  // Split by vocabulary: each rank's is the part through its classes.
  ctx.sum_over_tensor_group(dx);
  return dx;
}

}  // namespace tessera::gpt
