// The `gpt` model plugin's layers against PyTorch (data/gpt_reference.bin: a tiny GPT-2 with its
// head tied to the token embedding, computed in float64 from float32 weights). The plugin's head
// is its own parameter, so the reference's tied matrix is loaded into both wte and
// lm_head.weight, and the reference's wte gradient is the sum of the two gradients here.
// Also: the model's sample layout, its refusals, and what the layers check.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <map>
#include <string>
#include <vector>

#include "gpt/gpt_model.hpp"
#include "gpt_reference_file.hpp"
#include "tessera/base/error.hpp"

namespace tessera::gpt {
namespace {

using layers::Reference;
using layers::scaled_error;

GptShape shape_of(const Reference& ref) {
  return {ref.shape.layers, ref.shape.heads, ref.shape.width, ref.shape.context, ref.shape.vocab};
}

// Every layer's parameters and gradients as the strategy would hold them, filled from the
// reference by name.
struct Buffers {
  std::vector<std::vector<std::vector<float>>> params, grads;

  Buffers(const GptModel& model, Reference& ref) {
    const layers::ParamLayout layout(ref.shape);
    for (std::size_t l = 0; l < model.layer_count(); ++l) {
      auto& p = params.emplace_back();
      auto& g = grads.emplace_back();
      for (const auto& spec : model.layer(l).parameters()) {
        // The reference ties the head to wte: the same values in both.
        const std::string name = spec.name == "lm_head.weight" ? "wte" : spec.name;
        const auto values = layout.of(ref.params, name);
        EXPECT_EQ(values.size(), element_count(spec.shape)) << spec.name;
        p.emplace_back(values.begin(), values.end());
        g.emplace_back(values.size(), 0.0F);
      }
    }
  }
  static std::vector<BufferView> views(std::vector<std::vector<float>>& of_layer) {
    std::vector<BufferView> out;
    for (auto& v : of_layer) out.push_back(view_of(std::span<float>(v)));
    return out;
  }
  std::vector<float>& grad(const GptModel& model, const std::string& name) {
    for (std::size_t l = 0; l < model.layer_count(); ++l) {
      const auto specs = model.layer(l).parameters();
      for (std::size_t i = 0; i < specs.size(); ++i) {
        if (specs[i].name == name) return grads[l][i];
      }
    }
    throw std::runtime_error("no parameter " + name);
  }
};

Tensor ids(const std::vector<std::int64_t>& values, std::size_t batch, std::size_t time) {
  Tensor t({batch, time}, DType::i64);
  std::copy(values.begin(), values.end(), t.as<std::int64_t>().begin());
  return t;
}

TEST(GptModel, LogitsLossAndEveryGradientMatchPyTorch) {
  Reference ref = layers::read_reference(layers::kReferencePath);
  ASSERT_EQ(ref.shape.ignore_index, kIgnoreTarget);
  const GptModel model(GptConfig{shape_of(ref), 1});
  ASSERT_EQ(model.layer_count(), ref.shape.layers + 3);
  Buffers b(model, ref);

  // Forward through every layer, then the loss, then backward: what a strategy's runner does.
  std::vector<LayerContext> contexts(model.layer_count());
  Tensor x = ids(ref.tokens, ref.shape.batch, ref.shape.time);
  for (std::size_t l = 0; l < model.layer_count(); ++l) {
    x = model.layer(l).forward(x, Buffers::views(b.params[l]), contexts[l]);
  }
  ASSERT_EQ(x.shape(), (Shape{ref.shape.batch, ref.shape.time, ref.shape.vocab}));
  const double logits_error = scaled_error(x.as<float>(), ref.logits);
  EXPECT_LT(logits_error, 1e-5);
  LossResult loss = model.loss(x, ids(ref.targets, ref.shape.batch, ref.shape.time));
  const auto counted = static_cast<std::size_t>(std::count_if(
      ref.targets.begin(), ref.targets.end(), [](std::int64_t t) { return t != kIgnoreTarget; }));
  EXPECT_EQ(loss.targets, counted);
  EXPECT_LT(counted, ref.targets.size()) << "the reference batch ignores some targets";
  EXPECT_NEAR(loss.mean(), ref.loss, 2e-6 * ref.loss);

  Tensor grad = std::move(loss.grad_logits);
  contexts[0].set_input_gradient_needed(false);
  for (std::size_t l = model.layer_count(); l-- > 0;) {
    grad = model.layer(l).backward(grad, Buffers::views(b.params[l]), Buffers::views(b.grads[l]),
                                   contexts[l]);
  }
  EXPECT_EQ(grad.count(), 0U) << "token ids have no gradient";

  // The reference's tied wte gradient is the embedding's plus the head's.
  std::vector<float> tied = b.grad(model, "wte");
  const auto& head = b.grad(model, "lm_head.weight");
  for (std::size_t i = 0; i < tied.size(); ++i) tied[i] += head[i];
  const layers::ParamLayout layout(ref.shape);
  double worst = 0.0;
  for (const auto& e : layout.entries()) {
    const auto expected = std::span<const float>(ref.grads).subspan(e.offset, e.count);
    const std::vector<float>& actual = e.name == "wte" ? tied : b.grad(model, e.name);
    const double error = scaled_error(actual, expected);
    EXPECT_LT(error, 1e-5) << e.name;
    worst = std::max(worst, error);
  }
  std::cout << "gpt model: logits error " << logits_error << ", loss relative error "
            << std::abs(loss.mean() - ref.loss) / ref.loss << ", worst gradient error " << worst
            << " (each over the tensor's largest magnitude)\n";
}

TEST(GptModel, DeclaresTokenWindowsInAndNextTokensOut) {
  const GptModel model(GptConfig{{3, 2, 10, 7, 29}, 1});
  EXPECT_EQ(model.layout(), (SampleLayout{DType::i64, {7}, {7}, 29}));
  EXPECT_EQ(model.layout().targets_per_sample(), 7U);
  EXPECT_EQ(model.layer_count(), 6U);  // embedding, 3 blocks, ln_f, lm_head
  EXPECT_EQ(model.layer(1).name(), "h.0.block");
  EXPECT_EQ(model.layer(1).parameters().size(), 12U);
  EXPECT_EQ(model.layer(1).parameters()[2].name, "h.0.attn.c_attn.weight");
  EXPECT_EQ(model.layer(1).parameters()[2].shape, (Shape{30, 10}));
  // GPT-2's init: residual projections scaled by 1 / sqrt(2 layers).
  EXPECT_EQ(model.layer(1).parameters()[2].init, ParamInit::normal);
  EXPECT_FLOAT_EQ(model.layer(1).parameters()[2].init_std, 0.02F);
  EXPECT_FLOAT_EQ(model.layer(1).parameters()[4].init_std, 0.02F / std::sqrt(6.0F));
}

// nanoGPT's rule, as tools/reference/gpt_reference.py applies it to PyTorch's AdamW: the
// matrices ("*.weight" of two dimensions, the output head's included) decay; biases, layer
// norms and the token and position embeddings do not.
TEST(GptModel, DeclaresWeightDecayOnItsMatricesOnly) {
  const GptModel model(GptConfig{{2, 2, 10, 7, 29}, 1});
  std::size_t decayed = 0;
  for (std::size_t l = 0; l < model.layer_count(); ++l) {
    for (const auto& spec : model.layer(l).parameters()) {
      const bool matrix = spec.name.ends_with(".weight") && spec.shape.size() == 2;
      EXPECT_EQ(spec.weight_decay, matrix) << spec.name;
      decayed += spec.weight_decay ? 1 : 0;
    }
  }
  EXPECT_EQ(decayed, 2U * 4U + 1U);  // four Linear weights per block, and lm_head
}

TEST(GptModel, RefusesAWidthThatTheHeadsDoNotDivideNamingTheOption) {
  try {
    const GptModel model(GptConfig{{2, 3, 10, 8, 256}, 1});
    FAIL() << "width 10 over 3 heads was accepted";
  } catch (const ConfigError& e) {
    EXPECT_NE(
        std::string(e.what()).find("model.gpt.width: 10 is not a positive multiple of heads = 3"),
        std::string::npos)
        << e.what();
  }
}

TEST(GptModel, LayersRefuseWrongInputsNamingWhatTheyExpect) {
  const GptModel model(GptConfig{{1, 2, 8, 5, 16}, 1});
  std::vector<std::vector<float>> storage;
  std::vector<BufferView> views;
  const auto specs = model.layer(0).parameters();
  storage.reserve(specs.size());
  for (const auto& spec : specs) {
    storage.emplace_back(element_count(spec.shape), 0.0F);
    views.push_back(view_of(std::span<float>(storage.back())));
  }
  LayerContext ctx;
  // f32 features where token ids belong, and a sequence longer than the context.
  try {
    (void)model.layer(0).forward(Tensor({2, 5}, DType::f32), views, ctx);
    FAIL() << "f32 input accepted by the embedding";
  } catch (const InvalidArgument& e) {
    EXPECT_NE(std::string(e.what()).find("expects i64 token ids [n, T <= 5], got f32 2x5"),
              std::string::npos)
        << e.what();
  }
  EXPECT_THROW((void)model.layer(0).forward(Tensor({2, 6}, DType::i64), views, ctx),
               InvalidArgument);
  Tensor out_of_vocab({1, 2}, DType::i64);
  out_of_vocab.as<std::int64_t>()[1] = 16;
  EXPECT_THROW((void)model.layer(0).forward(out_of_vocab, views, ctx), InvalidArgument);
}

}  // namespace
}  // namespace tessera::gpt
