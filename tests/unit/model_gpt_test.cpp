// The `gpt` model plugin's layers against PyTorch (data/gpt_reference.bin: a tiny GPT-2 with its
// head tied to the token embedding, computed in float64 from float32 weights). The plugin's head
// is tied to wte by default (one parameter, whose one gradient is compared); with
// tie_embeddings = false it is its own parameter, loaded with the reference's tied matrix, and
// the two gradients sum to the reference's. Also: the model's sample layout, its refusals, what
// the layers check, and dropout (off in evaluation and at rate 0; in training, gradients that
// are those of the masked forward).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <optional>
#include <sstream>
#include <string>
#include <vector>

#include "gpt/gpt_model.hpp"
#include "gpt_reference_file.hpp"
#include "tessera/base/error.hpp"
#include "tessera/base/random.hpp"
#include "tessera/base/trace.hpp"
#include "tessera/strategy_kit/flat_state.hpp"

namespace tessera::gpt {
namespace {

using layers::Reference;
using layers::scaled_error;

GptShape shape_of(const Reference& ref, bool tie_embeddings) {
  return {ref.shape.layers,  ref.shape.heads, ref.shape.width,
          ref.shape.context, ref.shape.vocab, tie_embeddings};
}

// The model's parameters and gradients as a strategy holds them: one buffer per parameter of
// the FlatLayout (a tied one once, shared by the layers that use it), filled from the reference
// by name.
struct Buffers {
  FlatLayout layout;
  std::vector<std::vector<float>> params, grads;

  Buffers(const GptModel& model, Reference& ref) : layout(FlatLayout::of(model)) {
    const layers::ParamLayout reference(ref.shape);
    for (const auto& p : layout.params) {
      // The reference ties the head to wte: an untied head starts from the same values.
      const std::string name = p.param == "lm_head.weight" ? "wte" : p.param;
      const auto values = reference.of(ref.params, name);
      EXPECT_EQ(values.size(), p.count) << p.param;
      params.emplace_back(values.begin(), values.end());
      grads.emplace_back(values.size(), 0.0F);
    }
  }
  std::vector<BufferView> views(std::vector<std::vector<float>>& of, std::size_t layer) {
    std::vector<BufferView> out;
    for (const std::size_t index : layout.layer_params[layer]) {
      out.push_back(view_of(std::span<float>(of[index])));
    }
    return out;
  }
  std::vector<float>& grad(const std::string& name) {
    for (std::size_t i = 0; i < layout.params.size(); ++i) {
      if (layout.params[i].param == name) return grads[i];
    }
    throw std::runtime_error("no parameter " + name);
  }
};

Tensor ids(const std::vector<std::int64_t>& values, std::size_t batch, std::size_t time) {
  Tensor t({batch, time}, DType::i64);
  std::copy(values.begin(), values.end(), t.as<std::int64_t>().begin());
  return t;
}

// Forward through every layer, the loss, then backward, as a strategy's runner does; checks
// logits and loss against the reference and returns the logits' error.
double run_reference_batch(const GptModel& model, Reference& ref, Buffers& b) {
  std::vector<LayerContext> contexts(model.layer_count());
  Tensor x = ids(ref.tokens, ref.shape.batch, ref.shape.time);
  for (std::size_t l = 0; l < model.layer_count(); ++l) {
    x = model.layer(l).forward(x, b.views(b.params, l), contexts[l]);
  }
  EXPECT_EQ(x.shape(), (Shape{ref.shape.batch, ref.shape.time, ref.shape.vocab}));
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
    grad = model.layer(l).backward(grad, b.views(b.params, l), b.views(b.grads, l), contexts[l]);
  }
  EXPECT_EQ(grad.count(), 0U) << "token ids have no gradient";
  return logits_error;
}

TEST(GptModel, LogitsLossAndEveryGradientMatchPyTorchWithTheHeadTiedToWte) {
  Reference ref = layers::read_reference(layers::kReferencePath);
  ASSERT_EQ(ref.shape.ignore_index, kIgnoreTarget);
  const GptModel model(GptConfig{shape_of(ref, true), 1});
  ASSERT_EQ(model.layer_count(), ref.shape.layers + 3);
  Buffers b(model, ref);
  const layers::ParamLayout layout(ref.shape);
  // One parameter per reference tensor: the head's weight is wte, not a parameter of its own.
  ASSERT_EQ(b.layout.params.size(), layout.entries().size());
  ASSERT_EQ(b.layout.layer_params.back(), std::vector<std::size_t>{0}) << "lm_head uses wte";
  const double logits_error = run_reference_batch(model, ref, b);

  // wte's one gradient holds the embedding's and the head's contributions.
  double worst = 0.0;
  for (const auto& e : layout.entries()) {
    const auto expected = std::span<const float>(ref.grads).subspan(e.offset, e.count);
    const double error = scaled_error(b.grad(e.name), expected);
    EXPECT_LT(error, 1e-5) << e.name;
    worst = std::max(worst, error);
  }
  std::cout << "gpt model (tied head): logits error " << logits_error << ", worst gradient error "
            << worst << " (each over the tensor's largest magnitude)\n";
}

// tools/bench/gpt_scale.py reads the attention's share of a step from these spans: each block
// marks its attention kernel's forward and backward, with the sequence length, inside the
// layer's own time (the trace's nesting is what makes the share a share).
TEST(GptModel, EachBlockTracesItsAttentionForwardAndBackward) {
  Reference ref = layers::read_reference(layers::kReferencePath);
  const GptModel model(GptConfig{shape_of(ref, true), 1});
  Buffers b(model, ref);
  trace::Recorder recorder(0);
  recorder.set_active(true);
  {
    const trace::ScopedRecorder installed(&recorder);
    const trace::Span step("step", "test");
    run_reference_batch(model, ref, b);
  }
  const auto file = std::filesystem::path(::testing::TempDir()) / "gpt_attention_trace.json";
  recorder.write(file, "");
  std::ifstream in(file);
  const auto events = nlohmann::json::parse(in)["traceEvents"];
  std::filesystem::remove(file);
  std::map<std::string, int> count;
  double step_begin = 0.0;
  double step_end = 0.0;
  for (const auto& e : events) {
    if (e["ph"] == "X" && e["name"] == "step") {
      step_begin = e["ts"].get<double>();
      step_end = step_begin + e["dur"].get<double>();
    }
  }
  for (const auto& e : events) {
    if (e["ph"] != "X" || e["name"] == "step") continue;
    const auto name = e["name"].get<std::string>();
    ++count[name];
    EXPECT_EQ(e["cat"], "compute") << name;
    EXPECT_EQ(e["args"]["time"].get<std::size_t>(), ref.shape.time) << name;
    EXPECT_GE(e["ts"].get<double>(), step_begin) << name;
    EXPECT_LE(e["ts"].get<double>() + e["dur"].get<double>(), step_end) << name;
  }
  const auto blocks = static_cast<int>(ref.shape.layers);
  EXPECT_EQ(count, (std::map<std::string, int>{{"attention backward", blocks},
                                               {"attention forward", blocks}}));
}

TEST(GptModel, AnUntiedHeadsGradientAndWtesSumToPyTorchsTiedOne) {
  Reference ref = layers::read_reference(layers::kReferencePath);
  const GptModel model(GptConfig{shape_of(ref, false), 1});
  Buffers b(model, ref);
  const layers::ParamLayout layout(ref.shape);
  ASSERT_EQ(b.layout.params.size(), layout.entries().size() + 1) << "lm_head.weight of its own";
  (void)run_reference_batch(model, ref, b);

  std::vector<float> tied = b.grad("wte");
  const auto& head = b.grad("lm_head.weight");
  for (std::size_t i = 0; i < tied.size(); ++i) tied[i] += head[i];
  for (const auto& e : layout.entries()) {
    const auto expected = std::span<const float>(ref.grads).subspan(e.offset, e.count);
    EXPECT_LT(scaled_error(e.name == "wte" ? tied : b.grad(e.name), expected), 1e-5) << e.name;
  }
}

// --- Dropout ----------------------------------------------------------------------------------

constexpr float kDropout = 0.137F;

GptShape with_dropout(GptShape shape, float rate,
                      std::optional<float> attention_rate = std::nullopt) {
  shape.dropout = rate;
  shape.attention_dropout = attention_rate;
  return shape;
}

// The reference batch through every layer: a training forward drawing from `draw`, or with none
// an evaluation. Returns the logits' values; `contexts` keep what backward needs.
std::vector<float> forward_logits(const GptModel& model, const Reference& ref, Buffers& b,
                                  std::vector<LayerContext>& contexts,
                                  const std::optional<TrainingDraw>& draw) {
  contexts.clear();
  contexts.resize(model.layer_count());
  Tensor x = ids(ref.tokens, ref.shape.batch, ref.shape.time);
  for (std::size_t l = 0; l < model.layer_count(); ++l) {
    if (draw) contexts[l].set_training(*draw);
    x = model.layer(l).forward(x, b.views(b.params, l), contexts[l]);
  }
  return {x.as<float>().begin(), x.as<float>().end()};
}

TEST(GptModel, DropoutIsOffInEvaluationAndAtRateZero) {
  Reference ref = layers::read_reference(layers::kReferencePath);
  const GptModel plain(GptConfig{shape_of(ref, true), 1});
  const GptModel dropping(GptConfig{with_dropout(shape_of(ref, true), kDropout), 1});
  Buffers b(plain, ref);
  std::vector<LayerContext> contexts;
  const TrainingDraw draw{11, 3, 5};
  const auto evaluated = forward_logits(plain, ref, b, contexts, std::nullopt);
  // Rate 0 trains on the bits of evaluation, which are the bits of a model without dropout.
  EXPECT_EQ(forward_logits(plain, ref, b, contexts, draw), evaluated);
  // Evaluation of the same parameters with dropout configured draws nothing.
  EXPECT_EQ(forward_logits(dropping, ref, b, contexts, std::nullopt), evaluated);
  // Training with it does, and each step, site of the batch and seed draws other masks.
  const auto trained = forward_logits(dropping, ref, b, contexts, draw);
  EXPECT_NE(trained, evaluated);
  EXPECT_NE(forward_logits(dropping, ref, b, contexts, TrainingDraw{11, 4, 5}), trained);
  EXPECT_NE(forward_logits(dropping, ref, b, contexts, TrainingDraw{11, 3, 6}), trained);
  EXPECT_NE(forward_logits(dropping, ref, b, contexts, TrainingDraw{12, 3, 5}), trained);
  EXPECT_EQ(forward_logits(dropping, ref, b, contexts, draw), trained) << "drawn again alike";

  // dropout covers the attention probabilities unless attention_dropout says otherwise; on its
  // own, attention dropout is off in evaluation too.
  const GptModel not_attention(GptConfig{with_dropout(shape_of(ref, true), kDropout, 0.0F), 1});
  EXPECT_NE(forward_logits(not_attention, ref, b, contexts, draw), trained);
  const GptModel attention_only(GptConfig{with_dropout(shape_of(ref, true), 0.0F, kDropout), 1});
  EXPECT_EQ(forward_logits(attention_only, ref, b, contexts, std::nullopt), evaluated);
  EXPECT_NE(forward_logits(attention_only, ref, b, contexts, draw), evaluated);
}

// The gradients of a training step are those of the masked forward: along a direction through
// every parameter, the change of the loss over +-h (the same masks) is the gradient's dot product
// with it. A backward that left out a mask, or drew another, would be off by far more than the
// float rounding of the difference.
void expect_gradients_of_the_masked_forward(const GptShape& shape) {
  Reference ref = layers::read_reference(layers::kReferencePath);
  const GptModel model(GptConfig{shape, 1});
  Buffers b(model, ref);
  const TrainingDraw draw{11, 3, 5};
  const Tensor targets = ids(ref.targets, ref.shape.batch, ref.shape.time);
  std::vector<LayerContext> contexts;
  const auto loss_at = [&] {
    const auto logits = forward_logits(model, ref, b, contexts, draw);
    Tensor x({ref.shape.batch, ref.shape.time, ref.shape.vocab}, DType::f32);
    std::copy(logits.begin(), logits.end(), x.as<float>().begin());
    return model.loss(x, targets);
  };
  LossResult loss = loss_at();
  Tensor grad = std::move(loss.grad_logits);
  contexts[0].set_input_gradient_needed(false);
  for (std::size_t l = model.layer_count(); l-- > 0;) {
    grad = model.layer(l).backward(grad, b.views(b.params, l), b.views(b.grads, l), contexts[l]);
  }
  // The direction: a value in [-1, 1) per element; the gradient is of the mean loss.
  double along = 0.0;
  std::vector<std::vector<float>> direction;
  for (std::size_t p = 0; p < b.params.size(); ++p) {
    direction.emplace_back(b.params[p].size());
    for (std::size_t i = 0; i < direction[p].size(); ++i) {
      direction[p][i] = 2.0F * counter_uniform(5, p, i) - 1.0F;
      along += static_cast<double>(b.grads[p][i]) * direction[p][i];
    }
  }
  const auto moved = [&](float h) {
    const auto saved = b.params;
    for (std::size_t p = 0; p < b.params.size(); ++p) {
      for (std::size_t i = 0; i < direction[p].size(); ++i) b.params[p][i] += h * direction[p][i];
    }
    const double mean = loss_at().mean();
    b.params = saved;
    return mean;
  };
  const float h = 1e-3F;
  const double difference = (moved(h) - moved(-h)) / (2.0 * h);
  EXPECT_NEAR(difference, along, 0.01 * std::abs(along) + 1e-3)
      << "finite difference " << difference << ", gradient " << along;
}

TEST(GptModel, DropoutGradientsAreThoseOfTheMaskedForward) {
  const GptShape shape = shape_of(layers::read_reference(layers::kReferencePath), true);
  expect_gradients_of_the_masked_forward(with_dropout(shape, kDropout));
}

// The attention probabilities alone, at a rate that drops many of them: the kernel's backward
// with the mask drawn again (dV from the dropped probabilities, dP through the mask).
TEST(GptModel, DropoutGradientsAreThoseOfTheMaskedForwardWithAttentionDropoutAlone) {
  const GptShape shape = shape_of(layers::read_reference(layers::kReferencePath), true);
  expect_gradients_of_the_masked_forward(with_dropout(shape, 0.0F, 0.3F));
}

TEST(GptModel, RefusesADropoutRateOutsideZeroToOneNamingTheOption) {
  for (const float rate : {1.0F, -0.1F, std::nanf("")}) {
    try {
      const GptModel model(GptConfig{with_dropout({2, 2, 8, 5, 16}, rate), 1});
      FAIL() << "dropout " << rate << " was accepted";
    } catch (const ConfigError& e) {
      std::ostringstream named;
      named << "model.gpt.dropout: " << rate << " is not a rate in [0, 1)";
      EXPECT_NE(std::string(e.what()).find(named.str()), std::string::npos) << e.what();
    }
    try {
      const GptModel model(GptConfig{with_dropout({2, 2, 8, 5, 16}, 0.1F, rate), 1});
      FAIL() << "attention_dropout " << rate << " was accepted";
    } catch (const ConfigError& e) {
      std::ostringstream named;
      named << "model.gpt.attention_dropout: " << rate << " is not a rate in [0, 1)";
      EXPECT_NE(std::string(e.what()).find(named.str()), std::string::npos) << e.what();
    }
  }
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

// decay_all: every parameter decays, biases, norms and both embeddings too (the tied head is wte).
TEST(GptModel, DecayAllDeclaresWeightDecayOnEveryParameter) {
  GptShape shape{2, 2, 10, 7, 29};
  shape.decay_all = true;
  const GptModel model(GptConfig{shape, 1});
  std::size_t parameters = 0;
  for (std::size_t l = 0; l < model.layer_count(); ++l) {
    for (const auto& spec : model.layer(l).parameters()) {
      EXPECT_TRUE(spec.weight_decay) << spec.name;
      ++parameters;
    }
  }
  EXPECT_EQ(parameters, 2U + 2U * 12U + 2U + 1U);  // wte, wpe; the blocks; ln_f; lm_head
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
