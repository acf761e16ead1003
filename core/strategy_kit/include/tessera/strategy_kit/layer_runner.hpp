#pragma once
// The forward and backward loop over a range of a model's layers for one micro-batch: the one
// loop that ddp, zero1/2, zero3 and the local_sgd sample run, and what a pipeline stage runs
// on the activations it receives.

#include <cstddef>
#include <cstdint>
#include <functional>
#include <optional>
#include <span>
#include <vector>

#include "tessera/plugin/model.hpp"
#include "tessera/strategy_kit/micro_batches.hpp"
#include "tessera/strategy_kit/tensor_parallel.hpp"

namespace tessera {

enum class LayerPass : std::uint8_t { forward, backward };

// What the strategy does around each layer; hooks get model layer indices and run on the
// calling thread, in the order the layers run (forward: first up to last - 1; backward: back
// down). Exceptions from a hook propagate out of the runner.
struct LayerHooks {
  // Required. The parameters of `layer` for `pass`, made available now if this rank does not
  // hold them (zero3 gathers them here). The views must stay valid until after_layer returns.
  std::function<std::vector<BufferView>(std::size_t layer, LayerPass pass)> before_layer;
  // Required by backward. Where the backward of `layer` adds its gradients; asked right after
  // before_layer (zero2 prepares a staging window here). Valid until gradient_ready returns.
  std::function<std::vector<BufferView>(std::size_t layer)> gradients;
  // Optional. After `layer` has computed in `pass` (zero3 releases gathered parameters).
  std::function<void(std::size_t layer, LayerPass pass)> after_layer;
  // Optional. After the backward of `layer` and its after_layer: its gradients from this
  // micro-batch are complete (ddp starts bucket all-reduces, zero2 reduce-scatters).
  std::function<void(std::size_t layer)> gradient_ready;
};

// Layers [first, last) of a model.
struct LayerRange {
  // Every layer of the model, by model index: model_layers(), or with sliced layers in place
  // of whole ones (tensor parallelism). Not owned; must outlive the calls.
  std::span<const Layer* const> layers;
  std::size_t first = 0;
  std::size_t last = 0;  // one past the range
  // Whether anything consumes the gradient of the range's input: false for the model's first
  // layer (it sees data), true for a pipeline stage that sends that gradient back.
  bool input_gradient_needed = false;
  // The sums after column- and row-parallel layers; nullptr when no layer is split.
  const TensorParallelPlan* tensor_parallel = nullptr;
  // Labels of the runner's trace spans (docs/tracing.md), -1 for none: a pipeline schedule
  // sets its stage, and the micro-batch of each call on a copy of the range.
  int stage = -1;
  int micro_batch = -1;
  // Set for a training forward: forward_layers hands it to every layer's context
  // (LayerContext::set_training), so that layers which draw (dropout) draw this micro-batch's
  // masks. Unset: nothing is drawn. evaluate_layers never sets it.
  std::optional<TrainingDraw> training{};
};

// The model's own layers, by index, for LayerRange::layers.
[[nodiscard]] std::vector<const Layer*> model_layers(const Model& model);

// What one micro-batch's forward through a range saved for its backward: a LayerContext per
// layer. One per micro-batch in flight, so a pipeline schedule may run several forwards before
// their backwards; movable, not copyable.
class MicroBatchContexts {
 public:
  [[nodiscard]] bool empty_batch() const noexcept { return rows_ == 0; }
  [[nodiscard]] LayerContext& at(std::size_t layer) { return contexts_.at(layer - first_); }

 private:
  friend Tensor forward_layers(const LayerRange&, const Tensor&, const LayerHooks&,
                               MicroBatchContexts&);
  friend Tensor backward_layers(const LayerRange&, Tensor, const LayerHooks&, MicroBatchContexts&);
  std::vector<LayerContext> contexts_;
  std::size_t first_ = 0;
  std::size_t rows_ = 0;
};

// Both passes record a trace span per layer ("forward"/"backward", with the layer index and the
// range's labels) around the layer's hooks and compute, when a trace recorder is installed on
// the calling thread (strategy_kit/trace.hpp).

// Forward of one micro-batch through `range`, into fresh `contexts`. An input without rows
// computes nothing but calls every hook in the same order, so a rank whose share is empty
// issues the same collectives as the others. Layers keep aliases of their inputs: `input` must
// not be written until backward_layers has returned. Returns the range's output (for an empty
// micro-batch, the input itself). Throws InvalidArgument for a bad range or a missing hook.
Tensor forward_layers(const LayerRange& range, const Tensor& input, const LayerHooks& hooks,
                      MicroBatchContexts& contexts);

// Forward of one micro-batch through `range` for evaluation, where no backward follows: each
// layer computes with a context that is cleared before the next layer runs, so what stays alive
// is one layer's saved tensors and the activation passed on, not every layer's (a GPT evaluated
// with forward_layers keeps all its blocks' activations until the logits are out). Calls the
// hooks as forward_layers does, also for an input without rows. Returns the range's output.
Tensor evaluate_layers(const LayerRange& range, const Tensor& input, const LayerHooks& hooks);

// Backward through `range` (last - 1 down to first) of the micro-batch whose forward filled
// `contexts`, from `grad_output`, the gradient of the range's output (unused for an empty
// micro-batch). Returns the gradient of the range's input, empty unless
// range.input_gradient_needed. Releases what the contexts saved.
Tensor backward_layers(const LayerRange& range, Tensor grad_output, const LayerHooks& hooks,
                       MicroBatchContexts& contexts);

// forward_layers, then head(output) for the gradient of the output (the model's loss, or for a
// pipeline stage: send the activation on and receive its gradient back), then backward_layers.
// head is not called for an empty micro-batch. Returns the gradient of the range's input.
Tensor run_layers(const LayerRange& range, const Tensor& input, const LayerHooks& hooks,
                  const std::function<Tensor(Tensor output)>& head);

// One micro-batch through the whole model, the step of every data-parallel strategy: run_layers
// over all of `model`'s layers with the model's loss on `targets` as head, its gradient scaled by
// `gradient_weight` (run_micro_batches' weight), the layers drawing from `draw`
// (training_draw). Returns the loss summed over the rows and the correct count. An empty batch
// computes nothing but still calls every hook.
[[nodiscard]] PassTotals run_model_pass(const Model& model, const Tensor& inputs,
                                        const Tensor& targets, const LayerHooks& hooks,
                                        float gradient_weight, const TrainingDraw& draw);

}  // namespace tessera
