#include "gradient_average.hpp"

#include <algorithm>

#include "tessera/base/error.hpp"
#include "tessera/strategy_kit/device_memory.hpp"
#include "tessera/strategy_kit/grad_clip.hpp"
#include "tessera/strategy_kit/init.hpp"
#include "tessera/strategy_kit/param_checkpoint.hpp"

namespace my_plugin {

using tessera::Tensor;

GradientAverage::GradientAverage(const tessera::Options& /*options*/) {}

void GradientAverage::setup(const tessera::StrategySetup& setup) {
  TESSERA_CHECK(setup.world && setup.model && setup.optimizer,
                "gradient_average: setup needs world, model and optimizer");
  // Computes on the host: refuses [runtime] device = cuda with a message saying so.
  const auto allocator = tessera::host_strategy_allocator(setup, "gradient_average");
  setup_ = setup;
  layout_ = tessera::FlatLayout::of(*setup.model);
  no_decay_ = tessera::DecayExemptions::of(layout_);
  // After reconfigure() the old storage goes before the new is allocated.
  params_ = Tensor();
  grads_ = Tensor();
  state_ = Tensor();
  params_ = Tensor({layout_.total}, tessera::DType::f32, allocator);
  grads_ = Tensor({layout_.total}, tessera::DType::f32, allocator);
  state_ =
      Tensor({layout_.total * setup.optimizer->state_per_param()}, tessera::DType::f32, allocator);

  // Initialisation is a pure function of (seed, parameter, element): every rank, and every
  // strategy, starts from the same bits. Each layer gets one view per ParamSpec; a tied one
  // (ParamSpec::tied_to, GPT-2's head using wte) is its owner's parameter, which
  // layout_.layer_params names, and is initialised by its owner alone.
  layer_params_.assign(setup.model->layer_count(), {});
  layer_grads_.assign(setup.model->layer_count(), {});
  for (std::size_t l = 0; l < setup.model->layer_count(); ++l) {
    const auto specs = setup.model->layer(l).parameters();
    for (std::size_t s = 0; s < specs.size(); ++s) {
      const std::size_t index = layout_.layer_params[l][s];
      const auto& flat = layout_.params[index];
      const auto param = params_.as<float>().subspan(flat.offset, flat.count);
      if (!layout_.borrowed(l, s))
        tessera::initialize_parameter(specs[s], setup.seed, index, param);
      layer_params_[l].push_back(tessera::view_of(param));
      layer_grads_[l].push_back(
          tessera::view_of(grads_.as<float>().subspan(flat.offset, flat.count)));
    }
  }
  // The borrowers' gradients are collected apart and added into the owner's before its backward.
  ties_ = tessera::TiedGradients(layout_, tessera::Device::cpu());
}

tessera::LayerHooks GradientAverage::hooks() {
  tessera::LayerHooks hooks;
  hooks.before_layer = [this](std::size_t l, tessera::LayerPass) { return layer_params_[l]; };
  hooks.gradients = [this](std::size_t l) {
    auto grads = layer_grads_[l];
    ties_.prepare(l, grads);
    return grads;
  };
  return hooks;
}

tessera::StepStats GradientAverage::train_step(const tessera::Batch& batch,
                                               const tessera::StepInfo& info) {
  TESSERA_CHECK(setup_.world, "gradient_average: train_step before setup");
  tessera::Communicator& world = *setup_.world;
  const std::size_t n = tessera::batch_rows(batch.inputs);
  const auto ranks = static_cast<std::size_t>(world.size());
  const std::size_t global = tessera::global_batch_rows(n, ranks, info, "gradient_average");
  std::ranges::fill(grads_.as<float>(), 0.0F);

  // Each micro-batch's mean gradient is weighted by its share of the global batch, so that the
  // average over ranks below is the mean over the global batch even when shares are uneven. A
  // batch with fewer rows than micro_batches runs one micro-batch per row.
  const std::size_t micro = std::min(setup_.micro_batches, std::max<std::size_t>(n, 1));
  const tessera::PassTotals local = tessera::run_micro_batches(
      batch, micro, ranks, global, tessera::training_draw(setup_, info),
      [this](const Tensor& inputs, const Tensor& targets, float weight, bool /*last*/,
             const tessera::TrainingDraw& draw) {
        // Layers that draw (dropout) key on the step and the rows' place in the global batch.
        return tessera::run_model_pass(*setup_.model, inputs, targets, hooks(), weight, draw);
      });

  // The transports reduce in a fixed order: every rank gets the same bits.
  if (ranks > 1) world.all_reduce(grads_.view(), tessera::ReduceOp::avg)->wait(world.timeout());
  tessera::LossOverRanks loss(local);
  if (const auto loss_work = tessera::sum_loss_over_ranks(world, loss)) loss_work->wait();

  tessera::StepStats stats = tessera::step_stats(local, loss);
  const double sum_of_squares = tessera::gradient_sum_of_squares(grads_.as<float>());
  stats.grad_norm = tessera::global_norm(sum_of_squares);
  if (tessera::skip_nonfinite_update(setup_, stats)) return stats;
  const float coefficient =
      tessera::clip_coefficient(sum_of_squares, static_cast<float>(setup_.max_grad_norm));
  if (coefficient < 1.0F) {
    for (float& g : grads_.as<float>()) g *= coefficient;
  }
  tessera::StepInfo whole = info;
  whole.no_weight_decay = no_decay_.ranges();
  setup_.optimizer->step(params_.view(), grads_.view(), state_.view(), whole);
  return stats;
}

tessera::StepStats GradientAverage::evaluate(const tessera::Batch& batch) {
  TESSERA_CHECK(setup_.world, "gradient_average: evaluate before setup");
  tessera::StepStats stats;
  if (tessera::batch_rows(batch.inputs) == 0) return stats;
  const auto layers = tessera::model_layers(*setup_.model);
  const Tensor logits = tessera::evaluate_layers({layers, 0, layers.size()}, batch.inputs, hooks());
  return tessera::evaluation_stats(setup_.model->loss(logits, batch.targets));
}

void GradientAverage::save(tessera::CheckpointWriter& writer) {
  if (setup_.world->rank() != 0) return;
  const std::size_t slots = setup_.optimizer->state_per_param();
  tessera::save_param_index(writer, {"gradient_average", slots, tessera::params_of(layout_)});
  tessera::save_flat_range(writer, layout_, 0, layout_.total, params_.as<float>(),
                           state_.as<float>(), slots);
}

void GradientAverage::load(const tessera::CheckpointReader& reader) {
  tessera::load_flat_range(reader, layout_, 0, layout_.total, params_.as<float>(),
                           state_.as<float>(), setup_.optimizer->state_per_param());
}

void GradientAverage::reconfigure(std::shared_ptr<tessera::Communicator> new_world,
                                  const tessera::CheckpointReader& state) {
  TESSERA_CHECK(setup_.world, "gradient_average: reconfigure before setup");
  auto next = setup_;
  next.world = std::move(new_world);
  setup(next);
  load(state);
}

tessera::DataParallelPlacement GradientAverage::data_parallel_placement() const {
  TESSERA_CHECK(setup_.world, "gradient_average: data_parallel_placement before setup");
  return {setup_.world->rank(), setup_.world->size(), true};
}

tessera::MemoryReport GradientAverage::memory_report() const {
  tessera::MemoryReport report;
  report.parameter_bytes = params_.bytes();
  report.gradient_bytes = grads_.bytes();
  report.optimizer_state_bytes = state_.bytes();
  return report;
}

}  // namespace my_plugin
