#include "local_sgd_strategy.hpp"

#include <algorithm>
#include <span>

#include "tessera/base/error.hpp"
#include "tessera/strategy_kit/device_memory.hpp"
#include "tessera/strategy_kit/grad_clip.hpp"
#include "tessera/strategy_kit/init.hpp"
#include "tessera/strategy_kit/param_checkpoint.hpp"

namespace acme {

using tessera::Tensor;

LocalSgdStrategy::LocalSgdStrategy(const tessera::Options& options)
    : sync_every_(options.get_int("sync_every")) {
  TESSERA_CHECK(sync_every_ >= 1,
                "local_sgd: sync_every must be at least 1, got " + std::to_string(sync_every_));
}

void LocalSgdStrategy::setup(const tessera::StrategySetup& setup) {
  TESSERA_CHECK(setup.world && setup.model && setup.optimizer,
                "local_sgd: setup needs world, model and optimizer");
  TESSERA_CHECK(setup.micro_batches >= 1, "local_sgd: micro_batches must be at least 1");
  const auto allocator = tessera::strategy_allocator(setup, "local_sgd");
  setup_ = setup;
  layout_ = tessera::FlatLayout::of(*setup.model);
  no_decay_ = tessera::DecayExemptions::of(layout_);
  // Zero-filled; after reconfigure() the old storage goes before the new is allocated.
  params_ = Tensor();
  grads_ = Tensor();
  state_ = Tensor();
  params_ = Tensor({layout_.total}, tessera::DType::f32, allocator);
  grads_ = Tensor({layout_.total}, tessera::DType::f32, allocator);
  state_ =
      Tensor({layout_.total * setup.optimizer->state_per_param()}, tessera::DType::f32, allocator);
  steps_since_average_ = 0;

  // The core's initialisation is a pure function of (seed, parameter, element), so every
  // replica starts from the same bits without a broadcast.
  // One view per ParamSpec; a tied one (ParamSpec::tied_to) is its owner's parameter, which
  // layout_.layer_params names, initialised by its owner alone.
  layer_params_.assign(setup.model->layer_count(), {});
  layer_grads_.assign(setup.model->layer_count(), {});
  for (std::size_t l = 0; l < setup.model->layer_count(); ++l) {
    const auto specs = setup.model->layer(l).parameters();
    for (std::size_t s = 0; s < specs.size(); ++s) {
      const std::size_t index = layout_.layer_params[l][s];
      const auto& flat = layout_.params[index];
      const auto param = params_.as<float>().subspan(flat.offset, flat.count);
      const auto grad = grads_.as<float>().subspan(flat.offset, flat.count);
      if (!layout_.borrowed(l, s))
        tessera::initialize_parameter(specs[s], setup.seed, index, param);
      layer_params_[l].push_back(tessera::view_of(param));
      layer_grads_[l].push_back(tessera::view_of(grad));
    }
  }
  ties_ = tessera::TiedGradients(layout_, tessera::Device::cpu());
}

tessera::LayerHooks LocalSgdStrategy::hooks() {
  tessera::LayerHooks hooks;
  hooks.before_layer = [this](std::size_t l, tessera::LayerPass) { return layer_params_[l]; };
  hooks.gradients = [this](std::size_t l) {
    auto grads = layer_grads_[l];
    ties_.prepare(l, grads);
    return grads;
  };
  return hooks;
}

Tensor LocalSgdStrategy::forward(const Tensor& inputs) {
  const auto layers = tessera::model_layers(*setup_.model);
  return tessera::evaluate_layers({layers, 0, layers.size()}, inputs, hooks());
}

tessera::PassTotals LocalSgdStrategy::forward_backward(const Tensor& inputs, const Tensor& targets,
                                                       float weight,
                                                       const tessera::TrainingDraw& draw) {
  return tessera::run_model_pass(*setup_.model, inputs, targets, hooks(), weight, draw);
}

tessera::StepStats LocalSgdStrategy::train_step(const tessera::Batch& batch,
                                                const tessera::StepInfo& info) {
  TESSERA_CHECK(setup_.world, "local_sgd: train_step before setup");
  tessera::StepStats stats;
  const std::size_t n = tessera::batch_rows(batch.inputs);
  const auto grads = grads_.as<float>();
  std::ranges::fill(grads, 0.0F);

  // A rank whose share of an epoch's last batch is empty still steps (a zero gradient) and
  // still averages, so that every rank issues the same collectives. Each micro-batch's mean
  // gradient is weighted by its share of this rank's batch (a "world" of one rank here: the
  // averaging is this strategy's own).
  if (n > 0) {
    const tessera::PassTotals local = tessera::run_micro_batches(
        batch, std::min(setup_.micro_batches, n), 1, n, tessera::training_draw(setup_, info),
        [this](const Tensor& inputs, const Tensor& targets, float weight, bool /*last*/,
               const tessera::TrainingDraw& draw) {
          return forward_backward(inputs, targets, weight, draw);
        });
    stats = tessera::step_stats(local, tessera::LossOverRanks(local));
  }

  const double sum_of_squares = tessera::gradient_sum_of_squares(grads);
  stats.grad_norm = tessera::global_norm(sum_of_squares);
  if (setup_.max_grad_norm > 0.0) {
    const float coefficient =
        tessera::clip_coefficient(sum_of_squares, static_cast<float>(setup_.max_grad_norm));
    if (coefficient < 1.0F) {
      for (float& g : grads) g *= coefficient;
    }
  }
  tessera::StepInfo whole = info;
  whole.no_weight_decay = no_decay_.ranges();
  setup_.optimizer->step(params_.view(), grads_.view(), state_.view(), whole);

  if (++steps_since_average_ == sync_every_) {
    average(params_);
    steps_since_average_ = 0;
  }
  return stats;
}

void LocalSgdStrategy::average(const Tensor& values) {
  if (setup_.world->size() == 1 || values.count() == 0) return;
  // The transports reduce in a fixed order, so every replica gets the same bits and the
  // replicas are identical again afterwards.
  setup_.world->all_reduce(values.view(), tessera::ReduceOp::avg)->wait(setup_.world->timeout());
}

tessera::StepStats LocalSgdStrategy::evaluate(const tessera::Batch& batch) {
  TESSERA_CHECK(setup_.world, "local_sgd: evaluate before setup");
  tessera::StepStats stats;
  if (tessera::batch_rows(batch.inputs) == 0) return stats;
  Tensor logits = forward(batch.inputs);
  return tessera::evaluation_stats(setup_.model->loss(logits, batch.targets));
}

void LocalSgdStrategy::save(tessera::CheckpointWriter& writer) {
  if (steps_since_average_ != 0) {
    average(params_);
    steps_since_average_ = 0;
  }
  if (setup_.world->rank() != 0) return;
  const std::size_t slots = setup_.optimizer->state_per_param();
  tessera::save_param_index(writer, {"local_sgd", slots, tessera::params_of(layout_)});
  tessera::save_flat_range(writer, layout_, 0, layout_.total, params_.as<float>(),
                           state_.as<float>(), slots);
}

void LocalSgdStrategy::load(const tessera::CheckpointReader& reader) {
  tessera::load_flat_range(reader, layout_, 0, layout_.total, params_.as<float>(),
                           state_.as<float>(), setup_.optimizer->state_per_param());
  steps_since_average_ = 0;
}

void LocalSgdStrategy::reconfigure(std::shared_ptr<tessera::Communicator> new_world,
                                   const tessera::CheckpointReader& state) {
  TESSERA_CHECK(setup_.world, "local_sgd: reconfigure before setup");
  auto next = setup_;
  next.world = std::move(new_world);
  setup(next);
  load(state);
}

tessera::DataParallelPlacement LocalSgdStrategy::data_parallel_placement() const {
  TESSERA_CHECK(setup_.world, "local_sgd: data_parallel_placement before setup");
  return {setup_.world->rank(), setup_.world->size(), true};
}

tessera::MemoryReport LocalSgdStrategy::memory_report() const {
  tessera::MemoryReport report;
  report.parameter_bytes = params_.bytes();
  report.gradient_bytes = grads_.bytes();
  report.optimizer_state_bytes = state_.bytes();
  return report;
}

}  // namespace acme
