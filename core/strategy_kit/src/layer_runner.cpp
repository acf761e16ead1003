#include "tessera/strategy_kit/layer_runner.hpp"

#include <string>

#include "tessera/base/error.hpp"
#include "tessera/base/trace.hpp"
#include "tessera/strategy_kit/grad_clip.hpp"
#include "tessera/strategy_kit/micro_batches.hpp"

namespace tessera {
namespace {

void check_range(const LayerRange& range) {
  TESSERA_CHECK(range.first <= range.last && range.last <= range.layers.size(),
                "layer runner: range [" + std::to_string(range.first) + ", " +
                    std::to_string(range.last) + ") of a model of " +
                    std::to_string(range.layers.size()) + " layers");
  for (std::size_t l = range.first; l < range.last; ++l) {
    TESSERA_CHECK(range.layers[l] != nullptr,
                  "layer runner: layer " + std::to_string(l) + " is missing");
  }
}

// Labels a range leaves at -1 are left out of the span (an Arg with no key).
trace::Arg label(const char* key, int value) {
  return value < 0 ? trace::Arg{} : trace::Arg{key, value};
}

}  // namespace

std::vector<const Layer*> model_layers(const Model& model) {
  std::vector<const Layer*> layers;
  layers.reserve(model.layer_count());
  for (std::size_t l = 0; l < model.layer_count(); ++l) layers.push_back(&model.layer(l));
  return layers;
}

namespace {

// The forward of forward_layers and evaluate_layers: layer l computes with `context(l)`, and
// with `keep` false that context is cleared as soon as the layer returns (nothing will run its
// backward), so only the activation passed on stays alive.
template <class ContextOf>
Tensor run_forward(const LayerRange& range, const Tensor& input, const LayerHooks& hooks,
                   bool compute, ContextOf&& context) {
  Tensor x = input.alias();
  for (std::size_t l = range.first; l < range.last; ++l) {
    const trace::Span span("forward", "compute",
                           {{"layer", static_cast<std::int64_t>(l)},
                            label("micro_batch", range.micro_batch),
                            label("stage", range.stage)});
    const auto params = hooks.before_layer(l, LayerPass::forward);
    if (compute) {
      LayerContext& ctx = context(l);
      // A pair layer sums inside itself; its backward finds the group in the same context.
      if (range.tensor_parallel != nullptr)
        ctx.set_tensor_group(range.tensor_parallel->group_sum_for(l));
      x = range.layers[l]->forward(x, params, ctx);
      if (range.tensor_parallel != nullptr) range.tensor_parallel->after_forward(l, x);
    }
    if (hooks.after_layer) hooks.after_layer(l, LayerPass::forward);
  }
  return x;
}

}  // namespace

Tensor forward_layers(const LayerRange& range, const Tensor& input, const LayerHooks& hooks,
                      MicroBatchContexts& contexts) {
  check_range(range);
  TESSERA_CHECK(static_cast<bool>(hooks.before_layer), "layer runner: before_layer is required");
  contexts.contexts_.clear();
  contexts.contexts_.resize(range.last - range.first);
  contexts.first_ = range.first;
  contexts.rows_ = batch_rows(input);
  if (!contexts.contexts_.empty()) {
    contexts.contexts_.front().set_input_gradient_needed(range.input_gradient_needed);
  }
  if (range.training) {
    for (auto& context : contexts.contexts_) context.set_training(*range.training);
  }
  return run_forward(range, input, hooks, contexts.rows_ > 0,
                     [&](std::size_t l) -> LayerContext& { return contexts.at(l); });
}

Tensor evaluate_layers(const LayerRange& range, const Tensor& input, const LayerHooks& hooks) {
  check_range(range);
  TESSERA_CHECK(static_cast<bool>(hooks.before_layer), "layer runner: before_layer is required");
  LayerContext context;
  context.set_input_gradient_needed(false);
  return run_forward(range, input, hooks, batch_rows(input) > 0, [&](std::size_t) -> LayerContext& {
    context.clear();  // what the previous layer saved goes before this one allocates
    return context;
  });
}

Tensor backward_layers(const LayerRange& range, Tensor grad_output, const LayerHooks& hooks,
                       MicroBatchContexts& contexts) {
  check_range(range);
  TESSERA_CHECK(static_cast<bool>(hooks.before_layer) && static_cast<bool>(hooks.gradients),
                "layer runner: backward needs before_layer and gradients");
  TESSERA_CHECK(contexts.contexts_.size() == range.last - range.first &&
                    (range.first == range.last || contexts.first_ == range.first),
                "layer runner: the contexts are not from a forward through this range");
  const bool compute = !contexts.empty_batch();
  Tensor grad = std::move(grad_output);
  for (std::size_t l = range.last; l-- > range.first;) {
    const trace::Span span("backward", "compute",
                           {{"layer", static_cast<std::int64_t>(l)},
                            label("micro_batch", range.micro_batch),
                            label("stage", range.stage)});
    const auto params = hooks.before_layer(l, LayerPass::backward);
    const auto grads = hooks.gradients(l);
    if (compute) {
      LayerContext& ctx = contexts.at(l);
      grad = range.layers[l]->backward(grad, params, grads, ctx);
      ctx.clear();
      if (range.tensor_parallel != nullptr) range.tensor_parallel->after_backward(l, grad);
    }
    if (hooks.after_layer) hooks.after_layer(l, LayerPass::backward);
    if (hooks.gradient_ready) hooks.gradient_ready(l);
  }
  if (!compute || !range.input_gradient_needed) return {};
  return grad;
}

Tensor run_layers(const LayerRange& range, const Tensor& input, const LayerHooks& hooks,
                  const std::function<Tensor(Tensor output)>& head) {
  MicroBatchContexts contexts;
  Tensor output = forward_layers(range, input, hooks, contexts);
  Tensor grad_output;
  if (!contexts.empty_batch()) {
    const trace::Span span("head", "compute",
                           {label("micro_batch", range.micro_batch), label("stage", range.stage)});
    grad_output = head(std::move(output));
  }
  return backward_layers(range, std::move(grad_output), hooks, contexts);
}

PassTotals run_model_pass(const Model& model, const Tensor& inputs, const Tensor& targets,
                          const LayerHooks& hooks, float gradient_weight,
                          const TrainingDraw& draw) {
  const auto layers = model_layers(model);
  LayerRange range{layers, 0, layers.size()};
  range.training = draw;
  PassTotals totals;
  run_layers(range, inputs, hooks, [&](Tensor logits) {
    auto result = model.loss(logits, targets);
    totals = {result.loss_sum, result.targets, result.correct};
    // A weight of one leaves the bits as they are: nothing to do (the usual case).
    if (gradient_weight == 1.0F) return std::move(result.grad_logits);
    if (result.grad_logits.device() == Device::cpu()) {
      scale_gradients(result.grad_logits.as<float>(), gradient_weight);
      return std::move(result.grad_logits);
    }
    // On a device: scaled on the host (a batch of logits, small), the same bits as there.
    Tensor host = result.grad_logits.copy_to(cpu_allocator());
    scale_gradients(host.as<float>(), gradient_weight);
    return host.copy_to(result.grad_logits.allocator());
  });
  return totals;
}

}  // namespace tessera
