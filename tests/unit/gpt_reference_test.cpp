// A tiny GPT-2 composed from tessera's transformer span kernels and the Linear layer, llm.c
// style (one flat parameter buffer, forward and backward written out layer by layer), against
// the PyTorch reference in data/gpt_reference.bin (tools/reference/gpt_reference.py writes it
// and documents its layout): logits, loss, every parameter's gradient, and the losses of ten
// AdamW steps taken with the adam plugin's update. The reference is computed in float64 from the
// same float32 weights, so the differences below are this float32 composition's own error.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <fstream>
#include <map>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

#include "adam/adam.hpp"
#include "gpt_reference_file.hpp"
#include "layers/causal_attention.hpp"
#include "layers/embedding.hpp"
#include "layers/gelu.hpp"
#include "layers/layer_norm.hpp"
#include "layers/linear.hpp"
#include "layers/vocab_cross_entropy.hpp"

namespace tessera::layers {
namespace {

Tensor matrix(std::size_t rows, std::size_t cols) {
  Tensor t({rows, cols}, DType::f32);
  std::fill_n(t.as<float>().data(), t.count(), 0.0F);
  return t;
}

std::span<const float> values_of(const Tensor& t) {
  return t.as<float>();
}

BufferView view(std::span<float> values) {
  return view_of(values);
}

// GPT-2 over the flat buffers. Activations of the last forward stay here for backward.
class TinyGpt {
 public:
  TinyGpt(const ReferenceShape& shape, int threads)
      : s_(shape),
        layout_(shape),
        compute_(std::make_shared<ComputeContext>(threads)),
        qkv_("c_attn", s_.width, 3 * s_.width, compute_),
        attn_proj_("attn.c_proj", s_.width, s_.width, compute_),
        fc_("c_fc", s_.width, 4 * s_.width, compute_),
        mlp_proj_("mlp.c_proj", 4 * s_.width, s_.width, compute_),
        head_("lm_head", s_.width, s_.vocab, compute_),
        zero_head_bias_(s_.vocab, 0.0F),
        head_bias_grad_(s_.vocab, 0.0F) {}

  [[nodiscard]] const ParamLayout& layout() const { return layout_; }

  // Mean loss over the counted targets; logits() holds the logits afterwards.
  double forward(std::vector<float>& params, const std::vector<std::int64_t>& tokens,
                 const std::vector<std::int64_t>& targets) {
    const std::size_t n = s_.tokens();
    const std::size_t c = s_.width;
    auto p = [&](const std::string& name) { return layout_.of(params, name); };
    acts_.clear();
    head_ctx_.clear();
    acts_.resize(s_.layers);
    residual_in_ = matrix(n, c);
    embedding_forward<float>(residual_in_.as<float>(), tokens, p("wte"), p("wpe"),
                             {s_.batch, s_.time, c, s_.vocab, s_.context}, *compute_);
    const Tensor* x = &residual_in_;
    for (std::size_t l = 0; l < s_.layers; ++l) {
      const std::string q = "h." + std::to_string(l) + ".";
      LayerActivations& a = acts_[l];
      a.ln1 = normed(*x, p(q + "ln_1.weight"), p(q + "ln_1.bias"), a.ln1_mean, a.ln1_rstd);
      a.qkv = qkv_.forward(a.ln1, views(params, q + "attn.c_attn"), a.qkv_ctx);
      a.attention = matrix(n, c);
      a.lse.resize(n * s_.heads);
      causal_attention_forward<float>(a.attention.as<float>(), a.lse, values_of(a.qkv),
                                      attention_shape(), *compute_);
      a.residual_mid =
          attn_proj_.forward(a.attention, views(params, q + "attn.c_proj"), a.attn_proj_ctx);
      add_into(a.residual_mid, *x);
      a.ln2 =
          normed(a.residual_mid, p(q + "ln_2.weight"), p(q + "ln_2.bias"), a.ln2_mean, a.ln2_rstd);
      a.fc = fc_.forward(a.ln2, views(params, q + "mlp.c_fc"), a.fc_ctx);
      a.gelu = matrix(n, 4 * c);
      gelu_forward<float>(a.gelu.as<float>(), values_of(a.fc), *compute_);
      a.residual_out = mlp_proj_.forward(a.gelu, views(params, q + "mlp.c_proj"), a.mlp_proj_ctx);
      add_into(a.residual_out, a.residual_mid);
      x = &a.residual_out;
    }
    final_input_ = x;
    lnf_ = normed(*x, p("ln_f.weight"), p("ln_f.bias"), lnf_mean_, lnf_rstd_);
    const BufferView head_params[] = {view(p("wte")), view(zero_head_bias_)};
    logits_ = head_.forward(lnf_, head_params, head_ctx_);
    token_lse_.resize(n);
    const CrossEntropySum sum = vocab_cross_entropy_forward<float>(
        token_lse_, values_of(logits_), targets, s_.vocab, s_.ignore_index, *compute_);
    counted_ = sum.counted;
    return sum.loss_sum / static_cast<double>(sum.counted);
  }

  // Adds d(mean loss)/d(params) into grads (same layout as params).
  void backward(std::vector<float>& params, std::vector<float>& grads,
                const std::vector<std::int64_t>& tokens, const std::vector<std::int64_t>& targets) {
    const std::size_t n = s_.tokens();
    const std::size_t c = s_.width;
    auto g = [&](const std::string& name) { return layout_.of(grads, name); };
    auto p = [&](const std::string& name) { return layout_.of(params, name); };
    Tensor grad_logits = matrix(n, s_.vocab);
    vocab_cross_entropy_backward<float>(grad_logits.as<float>(), values_of(logits_), token_lse_,
                                        targets, s_.vocab, s_.ignore_index,
                                        1.0F / static_cast<float>(counted_), *compute_);
    const BufferView head_params[] = {view(p("wte")), view(zero_head_bias_)};
    const BufferView head_grads[] = {view(g("wte")), view(head_bias_grad_)};  // tied: adds
    const Tensor grad_lnf = head_.backward(grad_logits, head_params, head_grads, head_ctx_);
    // `dx`: the gradient of the residual stream, from the top down; each block's branches add
    // into it, so after block l it is the gradient of that block's input.
    Tensor dx = matrix(n, c);
    layer_norm_backward<float>(dx.as<float>(), g("ln_f.weight"), g("ln_f.bias"),
                               values_of(grad_lnf), values_of(*final_input_), p("ln_f.weight"),
                               lnf_mean_, lnf_rstd_, n, c, *compute_);
    for (std::size_t l = s_.layers; l-- > 0;) {
      const std::string q = "h." + std::to_string(l) + ".";
      LayerActivations& a = acts_[l];
      const Tensor& block_input = l == 0 ? residual_in_ : acts_[l - 1].residual_out;
      // MLP branch: dx is the gradient of residual_out = residual_mid + mlp(ln2(residual_mid)).
      const Tensor grad_gelu = mlp_proj_.backward(dx, views(params, q + "mlp.c_proj"),
                                                  views(grads, q + "mlp.c_proj"), a.mlp_proj_ctx);
      Tensor grad_fc = matrix(n, 4 * c);
      gelu_backward<float>(grad_fc.as<float>(), values_of(grad_gelu), values_of(a.fc), *compute_);
      const Tensor grad_ln2 = fc_.backward(grad_fc, views(params, q + "mlp.c_fc"),
                                           views(grads, q + "mlp.c_fc"), a.fc_ctx);
      layer_norm_backward<float>(dx.as<float>(), g(q + "ln_2.weight"), g(q + "ln_2.bias"),
                                 values_of(grad_ln2), values_of(a.residual_mid),
                                 p(q + "ln_2.weight"), a.ln2_mean, a.ln2_rstd, n, c, *compute_);
      // Attention branch: dx is now the gradient of residual_mid.
      const Tensor grad_attention = attn_proj_.backward(
          dx, views(params, q + "attn.c_proj"), views(grads, q + "attn.c_proj"), a.attn_proj_ctx);
      Tensor grad_qkv = matrix(n, 3 * c);
      causal_attention_backward<float>(grad_qkv.as<float>(), values_of(grad_attention),
                                       values_of(a.qkv), values_of(a.attention), a.lse,
                                       attention_shape(), *compute_);
      const Tensor grad_ln1 = qkv_.backward(grad_qkv, views(params, q + "attn.c_attn"),
                                            views(grads, q + "attn.c_attn"), a.qkv_ctx);
      layer_norm_backward<float>(dx.as<float>(), g(q + "ln_1.weight"), g(q + "ln_1.bias"),
                                 values_of(grad_ln1), values_of(block_input), p(q + "ln_1.weight"),
                                 a.ln1_mean, a.ln1_rstd, n, c, *compute_);
    }
    embedding_backward<float>(g("wte"), g("wpe"), values_of(dx), tokens,
                              {s_.batch, s_.time, c, s_.vocab, s_.context}, *compute_);
  }

  [[nodiscard]] const Tensor& logits() const { return logits_; }

 private:
  struct LayerActivations {
    Tensor ln1, qkv, attention, residual_mid, ln2, fc, gelu, residual_out;
    std::vector<float> ln1_mean, ln1_rstd, ln2_mean, ln2_rstd, lse;
    LayerContext qkv_ctx, attn_proj_ctx, fc_ctx, mlp_proj_ctx;
  };

  [[nodiscard]] AttentionShape attention_shape() const {
    return {s_.batch, s_.time, s_.heads, s_.width / s_.heads};
  }

  // A Linear layer's two views, "<prefix>.weight" then "<prefix>.bias".
  [[nodiscard]] std::vector<BufferView> views(std::vector<float>& flat,
                                              const std::string& prefix) const {
    return {view(layout_.of(flat, prefix + ".weight")), view(layout_.of(flat, prefix + ".bias"))};
  }

  Tensor normed(const Tensor& x, std::span<const float> weight, std::span<const float> bias,
                std::vector<float>& mean, std::vector<float>& rstd) const {
    const std::size_t n = s_.tokens();
    Tensor out = matrix(n, s_.width);
    mean.resize(n);
    rstd.resize(n);
    layer_norm_forward<float>(out.as<float>(), mean, rstd, values_of(x), weight, bias, n, s_.width,
                              *compute_);
    return out;
  }

  static void add_into(Tensor& target, const Tensor& addend) {
    const auto t = target.as<float>();
    const auto a = addend.as<float>();
    for (std::size_t i = 0; i < t.size(); ++i) t[i] += a[i];
  }

  ReferenceShape s_;
  ParamLayout layout_;
  std::shared_ptr<ComputeContext> compute_;
  Linear qkv_, attn_proj_, fc_, mlp_proj_, head_;
  std::vector<float> zero_head_bias_;  // GPT-2's head has no bias: Linear's stays zero
  std::vector<float> head_bias_grad_;  // and its gradient is dropped
  std::vector<LayerActivations> acts_;
  Tensor residual_in_, lnf_, logits_;
  const Tensor* final_input_ = nullptr;
  std::vector<float> lnf_mean_, lnf_rstd_, token_lse_;
  LayerContext head_ctx_;
  std::size_t counted_ = 0;
};

TEST(GptReference, LogitsLossAndEveryGradientMatchPyTorch) {
  Reference ref = read_reference(kReferencePath);
  TinyGpt gpt(ref.shape, 1);
  ASSERT_EQ(gpt.layout().total(), ref.params.size());
  const double loss = gpt.forward(ref.params, ref.tokens, ref.targets);
  EXPECT_NEAR(loss, ref.loss, 2e-6 * ref.loss);
  const double logits_error = scaled_error(gpt.logits().as<float>(), ref.logits);
  EXPECT_LT(logits_error, 1e-5);
  std::vector<float> grads(ref.params.size(), 0.0F);
  gpt.backward(ref.params, grads, ref.tokens, ref.targets);
  double worst_gradient = 0.0;
  std::string worst_name;
  for (const auto& e : gpt.layout().entries()) {
    const double error = scaled_error(std::span<const float>(grads).subspan(e.offset, e.count),
                                      std::span<const float>(ref.grads).subspan(e.offset, e.count));
    EXPECT_LT(error, 1e-5) << e.name;
    if (error > worst_gradient) {
      worst_gradient = error;
      worst_name = e.name;
    }
  }
  std::cout << "loss relative error " << std::abs(loss - ref.loss) / ref.loss << ", logits error "
            << logits_error << ", worst gradient error " << worst_gradient << " (" << worst_name
            << "), each over the tensor's largest magnitude\n";
}

TEST(GptReference, TenAdamWStepsFollowPyTorchsLosses) {
  Reference ref = read_reference(kReferencePath);
  TinyGpt gpt(ref.shape, 2);
  // The rule, as the model's ParamSpecs declare it and every strategy hands it to the
  // optimizer: one AdamW step over all parameters that skips decay on the exempt ranges.
  const adam::AdamOptimizer adamw(ref.adamw);
  std::vector<ElementRange> exempt;
  for (const auto& e : gpt.layout().entries()) {
    if (!e.decayed) exempt.push_back({e.offset, e.offset + e.count});
  }
  std::vector<float> params = ref.params;
  std::vector<float> grads(params.size());
  std::vector<float> state(2 * params.size(), 0.0F);
  double worst = 0.0;
  for (std::size_t step = 0; step <= ref.adam_steps; ++step) {
    const double loss = gpt.forward(params, ref.tokens, ref.targets);
    const double error = std::abs(loss - ref.losses[step]) / ref.losses[step];
    EXPECT_LT(error, 1e-5) << "after " << step << " steps";
    worst = std::max(worst, error);
    if (step == ref.adam_steps) break;
    std::fill(grads.begin(), grads.end(), 0.0F);
    gpt.backward(params, grads, ref.tokens, ref.targets);
    StepInfo info{static_cast<std::int64_t>(step) + 1, ref.learning_rate};
    info.no_weight_decay = exempt;
    adamw.step(params, grads, state, info);
  }
  EXPECT_LT(ref.losses[ref.adam_steps], 0.9 * ref.losses[0]) << "the reference run must learn";
  std::cout << "worst relative loss error over " << ref.adam_steps << " AdamW steps: " << worst
            << '\n';
}

}  // namespace
}  // namespace tessera::layers
