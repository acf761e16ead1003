#include "ddp_strategy.hpp"

#include <cstring>

#include "tessera/base/error.hpp"
#include "tessera/strategy_kit/device_memory.hpp"
#include "tessera/strategy_kit/init.hpp"
#include "tessera/strategy_kit/param_checkpoint.hpp"
#include "tessera/strategy_kit/weight_decay.hpp"

namespace tessera::ddp {

namespace {

DdpConfig config_from(const Options& options) {
  DdpConfig config;
  config.sync.bucket_cap_bytes = options.get_size("bucket_cap");
  config.sync.first_bucket_bytes = options.get_size("first_bucket");
  config.sync.compression = parse_gradient_compression(options.get_string("compression"));
  return config;
}

}  // namespace

DdpStrategy::DdpStrategy(const DdpConfig& config) : config_(config) {}
DdpStrategy::DdpStrategy(const Options& options) : DdpStrategy(config_from(options)) {}

void DdpStrategy::setup(const StrategySetup& setup) {
  TESSERA_CHECK(setup.world && setup.model && setup.optimizer,
                "ddp: setup needs world, model and optimizer");
  TESSERA_CHECK(setup.micro_batches >= 1, "ddp: micro_batches must be at least 1");
  const auto allocator = strategy_allocator(setup, "ddp");
  setup_ = setup;
  layout_ = FlatLayout::of(*setup.model);
  // After reconfigure(), the old storage goes before the new is allocated (the synchronizer
  // first: it points into it).
  sync_.reset();
  params_ = Tensor();
  grads_ = Tensor();
  params_ = Tensor({layout_.total}, DType::f32, allocator);  // zero-filled
  grads_ = Tensor({layout_.total}, DType::f32, allocator);
  sync_ = std::make_unique<GradientSynchronizer>(setup.world, config_.sync, allocator);
  memory_ = allocator;
  // Initialised on the host, then copied where the parameters live.
  const Tensor initial = host_copy(params_);
  const auto values = initial.as<float>();
  const auto device_span = [](const Tensor& t) {
    return std::span<float>(static_cast<float*>(t.view().data), t.count());
  };
  const auto params = device_span(params_);
  const auto grads = device_span(grads_);

  // Each element is a pure function of (seed, parameter index, element index): every rank
  // computes the same bits, so no broadcast is needed. A tied parameter is its owner's.
  layers_.clear();
  for (std::size_t l = 0; l < setup.model->layer_count(); ++l) {
    LayerViews views;
    const auto specs = setup.model->layer(l).parameters();
    for (std::size_t s = 0; s < specs.size(); ++s) {
      const std::size_t index = layout_.layer_params[l][s];
      const auto& flat = layout_.params[index];
      views.params.push_back(params_.view().slice(flat.offset, flat.count));
      views.grads.push_back(grads_.view().slice(flat.offset, flat.count));
      if (layout_.borrowed(l, s)) continue;
      initialize_parameter(specs[s], setup.seed, index, values.subspan(flat.offset, flat.count));
      views.sync_indices.push_back(
          sync_->add_parameter(flat.name, params.subspan(flat.offset, flat.count),
                               grads.subspan(flat.offset, flat.count), specs[s].weight_decay));
    }
    layers_.push_back(std::move(views));
  }
  ties_ = TiedGradients(layout_, allocator->device());
  // Every layer's gradient stays in grads_, zeroed before each step: with one micro-batch the
  // owner's is still zero when a borrower adds, so the borrower adds there (same bits).
  if (setup.micro_batches == 1) ties_.add_into_owners(flat_gradient_of(layout_, grads_));
  copy_back(initial, params_);
  sync_->finalize();
  // Held from the start, as memory_report says.
  (void)sync_->prepare_optimizer_state(*setup.optimizer);
}

std::vector<float> DdpStrategy::host_parameters() const {
  const Tensor host = host_copy(params_);
  const auto values = host.as<float>();
  return {values.begin(), values.end()};
}

LayerHooks DdpStrategy::hooks(bool last) {
  LayerHooks hooks;
  hooks.before_layer = [this](std::size_t l, LayerPass) { return layers_[l].params; };
  hooks.gradients = [this](std::size_t l) {
    auto grads = layers_[l].grads;
    ties_.prepare(l, grads);
    return grads;
  };
  // A layer's gradients are final after the last micro-batch's backward: their bucket may start
  // while earlier layers compute. An empty share still marks them, taking part in every bucket.
  if (last) {
    hooks.gradient_ready = [this](std::size_t l) {
      for (auto index : layers_[l].sync_indices) sync_->grad_ready(index);
    };
  }
  return hooks;
}

Tensor DdpStrategy::forward(const Tensor& inputs) {
  const auto layers = model_layers(*setup_.model);
  return evaluate_layers({layers, 0, layers.size()}, placed_in(memory_, inputs), hooks(false));
}

PassTotals DdpStrategy::forward_backward(const Tensor& inputs, const Tensor& targets,
                                         float gradient_weight, bool last,
                                         const TrainingDraw& draw) {
  return run_model_pass(*setup_.model, placed_in(memory_, inputs), targets, hooks(last),
                        gradient_weight, draw);
}

StepStats DdpStrategy::train_step(const Batch& batch, const StepInfo& info) {
  TESSERA_CHECK(sync_ != nullptr, "ddp: train_step before setup");
  const std::size_t n = batch_rows(batch.inputs);
  const auto world = static_cast<std::size_t>(setup_.world->size());
  const std::size_t global = global_batch_rows(n, world, info, "ddp");
  if (!grads_zero_) fill_zero(*memory_, grads_.view());
  grads_zero_ = false;

  // The all-reduce averages over ranks; run_micro_batches weights each micro-batch's mean
  // gradient so that this average is the mean over the global batch.
  const std::size_t micro =
      std::min<std::size_t>(setup_.micro_batches, std::max<std::size_t>(n, 1));
  const PassTotals local =
      run_micro_batches(batch, micro, world, global, training_draw(setup_, info),
                        [this](const Tensor& inputs, const Tensor& targets, float weight, bool last,
                               const TrainingDraw& draw) {
                          return forward_backward(inputs, targets, weight, last, draw);
                        });
  LossOverRanks loss(local);
  // Issued after every bucket, so its place in the collective order is the same everywhere.
  const auto loss_work = sum_loss_over_ranks(*setup_.world, memory_.get(), loss);
  sync_->wait(setup_.world->timeout());
  if (loss_work) loss_work->wait();
  StepStats stats = step_stats(local, loss);
  if (setup_.max_grad_norm > 0.0 || setup_.skip_nonfinite_steps) {
    // The norm is needed before the update: to clip, or to decide whether to skip it.
    stats.grad_norm = sync_->clip_grad_norm(setup_.max_grad_norm);
    if (skip_nonfinite_update(setup_, stats)) return stats;
    sync_->step(*setup_.optimizer, info);
  } else {
    // Norm, update and the next step's zeroing in one pass over the gradients.
    stats.grad_norm = sync_->step_unclipped_and_zero(*setup_.optimizer, info);
    grads_zero_ = true;
  }
  return stats;
}

StepStats DdpStrategy::evaluate(const Batch& batch) {
  TESSERA_CHECK(sync_ != nullptr, "ddp: evaluate before setup");
  StepStats stats;
  const std::size_t n = batch_rows(batch.inputs);
  if (n == 0) return stats;
  Tensor logits = forward(batch.inputs);
  return evaluation_stats(setup_.model->loss(logits, batch.targets));
}

void DdpStrategy::save(CheckpointWriter& writer) {
  // Replicated state: rank 0 writes each parameter whole, or every rank when the writer keeps
  // each rank's copy apart (the elastic runtime's: then no copy travels between ranks).
  if (setup_.world->rank() != 0 && !writer.every_rank_writes_replicated_state()) return;
  const std::size_t slots = setup_.optimizer->state_per_param();
  save_param_index(writer, {"ddp", slots, params_of(layout_), weight_decay_flags(layout_)});
  const Tensor params = host_copy(params_);
  const Tensor state = host_copy(sync_->optimizer_state_tensor());
  save_flat_range(writer, layout_, 0, layout_.total, params.as<float>(), state.as<float>(), slots);
}

void DdpStrategy::load(const CheckpointReader& reader) {
  const Tensor& optimizer_state = sync_->prepare_optimizer_state(*setup_.optimizer);
  const Tensor params = host_copy(params_);
  const Tensor state = host_copy(optimizer_state);
  load_flat_range(reader, layout_, 0, layout_.total, params.as<float>(), state.as<float>(),
                  setup_.optimizer->state_per_param());
  copy_back(params, params_);
  copy_back(state, optimizer_state);
}

void DdpStrategy::reconfigure(std::shared_ptr<Communicator> new_world,
                              const CheckpointReader& state) {
  TESSERA_CHECK(sync_, "ddp: reconfigure before setup");
  // A step waits for all its all-reduces, so nothing is in flight on the old world between
  // steps. The synchronizer (buckets, old communicator) goes first, so the old and new buffers
  // never coexist.
  auto next = setup_;
  next.world = std::move(new_world);
  sync_.reset();
  setup(next);  // initialises parameters that load() then overwrites: simple, and rare
  load(state);
}

DataParallelPlacement DdpStrategy::data_parallel_placement() const {
  TESSERA_CHECK(setup_.world, "ddp: data_parallel_placement before setup");
  return {setup_.world->rank(), setup_.world->size(), true};
}

MemoryReport DdpStrategy::memory_report() const {
  MemoryReport report;
  report.parameter_bytes = params_.bytes();
  report.gradient_bytes = grads_.bytes();
  if (sync_) {
    report.optimizer_state_bytes = sync_->optimizer_state_bytes();
    report.buffer_bytes = sync_->buffer_bytes();
  }
  report.buffer_bytes += ties_.buffer_bytes();
  return report;
}

}  // namespace tessera::ddp
