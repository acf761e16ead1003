#include "zero3_strategy.hpp"

#include <algorithm>
#include <cstring>

#include "tessera/base/error.hpp"
#include "tessera/strategy_kit/device_memory.hpp"
#include "tessera/strategy_kit/grad_clip.hpp"
#include "tessera/strategy_kit/init.hpp"

namespace tessera::zero3 {

namespace {

Zero3Config config_from(const Options& options) {
  Zero3Config config;
  config.reshard_after_forward = options.get_bool("reshard_after_forward");
  const auto prefetch = options.get_int("prefetch");
  const auto unit_size = options.get_int("unit_size");
  const auto max_inflight = options.get_int("max_inflight");
  TESSERA_CHECK(prefetch >= 0, "zero3: prefetch must not be negative");
  TESSERA_CHECK(unit_size >= 1, "zero3: unit_size must be at least 1");
  TESSERA_CHECK(max_inflight >= 1, "zero3: max_inflight must be at least 1");
  config.prefetch = static_cast<std::size_t>(prefetch);
  config.unit_size = static_cast<std::size_t>(unit_size);
  config.max_inflight = static_cast<std::size_t>(max_inflight);
  return config;
}

}  // namespace

Zero3Strategy::Zero3Strategy(const Zero3Config& config) : config_(config) {
  TESSERA_CHECK(config_.unit_size >= 1, "zero3: unit_size must be at least 1");
  TESSERA_CHECK(config_.max_inflight >= 1, "zero3: max_inflight must be at least 1");
}
Zero3Strategy::Zero3Strategy(const Options& options) : Zero3Strategy(config_from(options)) {}

Zero3Strategy::~Zero3Strategy() {
  drain_in_flight();
}

void Zero3Strategy::drain_in_flight() noexcept {
  // Collectives still in flight write into buffers that die with us: let them land first.
  const Duration timeout = setup_.world ? setup_.world->timeout() : Duration{0};
  for (auto& unit : gathered_) {
    if (!unit.work) continue;
    try {
      unit.work->wait(timeout);
    } catch (...) {  // NOLINT(bugprone-empty-catch): see the declaration
    }
  }
  for (auto& work : scatters_) {
    try {
      work->wait(timeout);
    } catch (...) {  // NOLINT(bugprone-empty-catch): as above
    }
  }
  scatters_.clear();
  if (pool_) pool_->quiesce(timeout);
}

void Zero3Strategy::reconfigure(std::shared_ptr<Communicator> new_world,
                                const CheckpointReader& state) {
  TESSERA_CHECK(setup_.world, "zero3: reconfigure before setup");
  drain_in_flight();
  auto next = setup_;
  next.world = std::move(new_world);
  pool_.reset();  // quiesced above; setup() allocates one sized for the new units
  setup(next);    // re-plans the units' shards; initialises what load() overwrites
  load(state);
}

DataParallelPlacement Zero3Strategy::data_parallel_placement() const {
  TESSERA_CHECK(setup_.world, "zero3: data_parallel_placement before setup");
  return {setup_.world->rank(), setup_.world->size(), true};
}

void Zero3Strategy::setup(const StrategySetup& setup) {
  TESSERA_CHECK(setup.world && setup.model && setup.optimizer,
                "zero3: setup needs world, model and optimizer");
  TESSERA_CHECK(setup.micro_batches >= 1, "zero3: micro_batches must be at least 1");
  allocator_ = strategy_allocator(setup, "zero3");
  setup_ = setup;
  const auto& model = *setup.model;
  const int rank = setup.world->rank();
  const int world = setup.world->size();
  layout_ = FlatLayout::of(model);
  plan_ = UnitPlan::make(model, layout_, config_.unit_size, world);

  // The owners' specs in FlatLayout order (a tied spec is its owner's parameter).
  specs_.clear();
  for (std::size_t l = 0; l < model.layer_count(); ++l) {
    const auto specs = model.layer(l).parameters();
    for (std::size_t s = 0; s < specs.size(); ++s) {
      if (!layout_.borrowed(l, s)) specs_.push_back(specs[s]);
    }
  }
  param_unit_.assign(layout_.params.size(), 0);
  for (std::size_t u = 0; u < plan_.units.size(); ++u) {
    for (const std::size_t index : plan_.units[u].params) param_unit_[index] = u;
  }
  lent_.assign(model.layer_count(), {});
  // After reconfigure(), the old storage goes before the new is allocated (zero-filled).
  params_ = Tensor();
  grads_ = Tensor();
  state_ = Tensor();
  params_ = Tensor({plan_.shard_total}, DType::f32, allocator_);
  grads_ = Tensor({plan_.shard_total}, DType::f32, allocator_);
  state_ = Tensor({plan_.shard_total * setup.optimizer->state_per_param()}, DType::f32, allocator_);
  // Initialised on the host, then copied where the shard lives.
  const Tensor initial = host_copy(params_);
  const auto params = initial.as<float>();

  // Each element is a pure function of (seed, parameter index, element index), so a rank
  // initialises exactly its shard and the gathered units equal ddp's parameters bit for bit.
  const auto exemptions = DecayExemptions::of(layout_);
  shard_exemptions_.clear();
  for (const auto& unit : plan_.units) {
    const std::size_t own_begin = unit.flat_begin + unit.owned_begin(rank);
    const std::size_t own_end = unit.flat_begin + unit.owned_end(rank);
    exemptions.append_within(own_begin, own_end, unit.shard_offset, shard_exemptions_);
    for (const std::size_t index : unit.params) {
      const auto& flat = layout_.params[index];
      const std::size_t lo = std::max(own_begin, flat.offset);
      const std::size_t hi = std::min(own_end, flat.offset + flat.count);
      if (lo >= hi) continue;
      const auto out = params.subspan(unit.shard_offset + (lo - own_begin), hi - lo);
      initialize_parameter(specs_[index], setup.seed, index, out, lo - flat.offset);
    }
  }
  copy_back(initial, params_);
  if (pool_) pool_->quiesce(setup.world->timeout());
  pool_ = std::make_unique<GatherPool>(plan_.largest_gathered, allocator_);
  norm_ = std::make_unique<ShardedGradNorm>(plan_, rank, world);
  gathered_.assign(plan_.units.size(), {});
  ties_ = TiedGradients(layout_, allocator_->device());
}

void Zero3Strategy::request_gather(std::size_t unit) {
  auto& g = gathered_[unit];
  if (g.held) return;
  const auto& u = plan_.units[unit];
  const auto world = static_cast<std::size_t>(setup_.world->size());
  g.buffer = pool_->acquire_for_collective();
  g.held = true;
  const BufferView shard = params_.view().slice(u.shard_offset, u.shard_elements);
  const BufferView full{pool_->data(g.buffer), world * u.shard_elements, DType::f32,
                        allocator_->device()};
  g.work = setup_.world->all_gather(shard, full);
}

std::size_t Zero3Strategy::inflight_gathers() const {
  return static_cast<std::size_t>(
      std::count_if(gathered_.begin(), gathered_.end(), [](const Gathered& g) { return g.work; }));
}

void Zero3Strategy::prefetch_from(std::size_t unit, int direction) {
  for (std::size_t k = 1; k <= config_.prefetch; ++k) {
    const auto next =
        static_cast<std::ptrdiff_t>(unit) + direction * static_cast<std::ptrdiff_t>(k);
    if (next < 0 || next >= static_cast<std::ptrdiff_t>(plan_.units.size())) return;
    if (gathered_[static_cast<std::size_t>(next)].held) continue;
    if (inflight_gathers() >= config_.max_inflight) return;
    request_gather(static_cast<std::size_t>(next));
  }
}

float* Zero3Strategy::wait_gathered(std::size_t unit) {
  auto& g = gathered_[unit];
  request_gather(unit);
  if (g.work) {
    auto work = std::move(g.work);
    work->wait(setup_.world->timeout());
  }
  return pool_->data(g.buffer);
}

void Zero3Strategy::release_gathered(std::size_t unit) {
  auto& g = gathered_[unit];
  if (!g.held) return;
  pool_->release(g.buffer, std::move(g.work));
  g.held = false;
}

std::vector<BufferView> Zero3Strategy::views(std::size_t layer, const Unit& unit,
                                             float* base) const {
  std::vector<BufferView> out;
  const auto& params = layout_.layer_params[layer];
  for (std::size_t s = 0; s < params.size(); ++s) {
    const auto& flat = layout_.params[params[s]];
    if (layout_.borrowed(layer, s)) {
      out.emplace_back();  // a tied parameter: lend_tied() or ties_ fill it
      continue;
    }
    out.push_back(
        {base + (flat.offset - unit.flat_begin), flat.count, DType::f32, allocator_->device()});
  }
  return out;
}

void Zero3Strategy::lend_tied(std::size_t layer, std::vector<BufferView>& views) {
  const auto& params = layout_.layer_params[layer];
  for (std::size_t s = 0; s < params.size(); ++s) {
    if (!layout_.borrowed(layer, s)) continue;
    const std::size_t u = param_unit_[params[s]];
    // The owner's unit, gathered for this layer unless something else holds it already.
    if (!gathered_[u].held) {
      request_gather(u);
      lent_[layer].push_back(u);
    }
    const auto& flat = layout_.params[params[s]];
    views[s] = {wait_gathered(u) + (flat.offset - plan_.units[u].flat_begin), flat.count,
                DType::f32, allocator_->device()};
  }
}

void Zero3Strategy::return_tied(std::size_t layer) {
  for (const std::size_t u : lent_[layer]) release_gathered(u);
  lent_[layer].clear();
}

std::size_t Zero3Strategy::unit_of(std::size_t layer) const {
  // Units cover the layers in order; a model has a handful of them.
  for (std::size_t u = 0; u < plan_.units.size(); ++u) {
    if (layer < plan_.units[u].end_layer) return u;
  }
  throw InvalidArgument("zero3: layer " + std::to_string(layer) + " is in no unit");
}

LayerHooks Zero3Strategy::hooks(bool for_backward, bool last, UnitGradient& gradient) {
  const bool accumulate = setup_.micro_batches > 1;
  const auto world = static_cast<std::size_t>(setup_.world->size());
  LayerHooks hooks;
  // A unit is gathered when its first layer in the direction of travel starts (the next one
  // prefetched behind it) and released after its last; layers in between find it held.
  hooks.before_layer = [this](std::size_t l, LayerPass pass) {
    const std::size_t u = unit_of(l);
    const auto& unit = plan_.units[u];
    if (pass == LayerPass::forward && l == unit.first_layer) {
      request_gather(u);
      prefetch_from(u, +1);  // queued behind this unit's gather, overlapping its compute
    } else if (pass == LayerPass::backward && l + 1 == unit.end_layer) {
      request_gather(u);
      if (u > 0) prefetch_from(u, -1);
    }
    auto out = views(l, unit, wait_gathered(u));
    lend_tied(l, out);
    return out;
  };
  hooks.after_layer = [this, for_backward](std::size_t l, LayerPass pass) {
    return_tied(l);
    const std::size_t u = unit_of(l);
    const auto& unit = plan_.units[u];
    if (pass == LayerPass::forward && l + 1 == unit.end_layer) {
      // Backward starts with the last unit, so keeping it saves a gather.
      const bool keep =
          for_backward && (!config_.reshard_after_forward || u + 1 == plan_.units.size());
      if (!keep) release_gathered(u);
    } else if (pass == LayerPass::backward && l == unit.first_layer) {
      release_gathered(u);
    }
  };
  hooks.gradients = [this, accumulate, world, &gradient](std::size_t l) {
    const std::size_t u = unit_of(l);
    const auto& unit = plan_.units[u];
    if (l + 1 == unit.end_layer) {
      if (accumulate) {
        if (accumulated_.empty()) {
          for (const auto& each : plan_.units)
            accumulated_.emplace_back(Shape{world * each.shard_elements}, DType::f32, allocator_);
        }
        gradient.base = static_cast<float*>(accumulated_[u].view().data);
      } else {
        gradient.buffer = pool_->acquire_for_compute(setup_.world->timeout());
        gradient.base = pool_->data(gradient.buffer);
        fill_zero(*allocator_,
                  {gradient.base, world * unit.shard_elements, DType::f32, allocator_->device()});
      }
    }
    auto out = views(l, unit, gradient.base);
    ties_.prepare(l, out);
    return out;
  };
  // The unit's gradient is complete: its reduce-scatter runs while earlier units compute.
  hooks.gradient_ready = [this, accumulate, world, last, &gradient](std::size_t l) {
    const std::size_t u = unit_of(l);
    const auto& unit = plan_.units[u];
    if (l != unit.first_layer) return;
    std::shared_ptr<Work> scatter;
    if (last) {
      scatter = setup_.world->reduce_scatter(
          {gradient.base, world * unit.shard_elements, DType::f32, allocator_->device()},
          grads_.view().slice(unit.shard_offset, unit.shard_elements),
          ReduceOp::avg);  // as ddp's all-reduce: rank-order sum, then / world
      scatters_.push_back(scatter);
    }
    if (!accumulate) pool_->release(gradient.buffer, std::move(scatter));
  };
  return hooks;
}

PassTotals Zero3Strategy::forward_backward(const Tensor& inputs, const Tensor& targets,
                                           float gradient_weight, bool last,
                                           const TrainingDraw& draw) {
  UnitGradient gradient;
  // An empty batch computes nothing but still issues every gather and reduce-scatter.
  return run_model_pass(*setup_.model, placed_in(allocator_, inputs), targets,
                        hooks(true, last, gradient), gradient_weight, draw);
}

StepStats Zero3Strategy::train_step(const Batch& batch, const StepInfo& info) {
  TESSERA_CHECK(pool_ != nullptr, "zero3: train_step before setup");
  const std::size_t n = batch_rows(batch.inputs);
  const auto world = static_cast<std::size_t>(setup_.world->size());
  const std::size_t global = global_batch_rows(n, world, info, "zero3");
  const Duration timeout = setup_.world->timeout();

  // Micro-batches and their weights exactly as ddp's, so that the gradients match its bits.
  // Every rank runs the same number of micro-batches (the collective sequence depends on it).
  const PassTotals local =
      run_micro_batches(batch, setup_.micro_batches, world, global, training_draw(setup_, info),
                        [this](const Tensor& inputs, const Tensor& targets, float weight, bool last,
                               const TrainingDraw& draw) {
                          return forward_backward(inputs, targets, weight, last, draw);
                        });
  LossOverRanks loss(local);
  const auto loss_work = sum_loss_over_ranks(*setup_.world, allocator_.get(), loss);
  auto scatters = std::move(scatters_);
  scatters_.clear();
  for (auto& work : scatters) work->wait(timeout);
  if (loss_work) loss_work->wait(timeout);
  accumulated_.clear();
  StepStats stats = step_stats(local, loss);

  // On a GPU the norm is summed over a host copy of the shard: the host's bits.
  const Tensor grads = host_copy(grads_);
  const double sum_of_squares =
      norm_->sum_of_squares(grads.as<float>(), *setup_.world, allocator_.get(), timeout);
  const float coefficient =
      clip_coefficient(sum_of_squares, static_cast<float>(setup_.max_grad_norm));
  if (coefficient != 1.0F) {
    scale_gradients(grads.as<float>(), coefficient);
    copy_back(grads, grads_);
  }
  stats.grad_norm = global_norm(sum_of_squares);
  if (skip_nonfinite_update(setup_, stats)) return stats;
  StepInfo shard_info = info;
  shard_info.no_weight_decay = shard_exemptions_;
  setup_.optimizer->step(params_.view(), grads_.view(), state_.view(), shard_info);
  return stats;
}

StepStats Zero3Strategy::evaluate(const Batch& batch) {
  TESSERA_CHECK(pool_ != nullptr, "zero3: evaluate before setup");
  StepStats stats;
  const std::size_t n = batch_rows(batch.inputs);
  const auto layers = model_layers(*setup_.model);
  UnitGradient unused;
  Tensor logits = evaluate_layers({layers, 0, layers.size()}, placed_in(allocator_, batch.inputs),
                                  hooks(false, false, unused));
  if (n == 0) return stats;
  return evaluation_stats(setup_.model->loss(logits, batch.targets));
}

MemoryReport Zero3Strategy::memory_report() const {
  MemoryReport report;
  report.parameter_bytes = params_.bytes();
  report.gradient_bytes = grads_.bytes();
  report.optimizer_state_bytes = state_.bytes();
  if (pool_) report.buffer_bytes = pool_->bytes();
  if (norm_) report.buffer_bytes += norm_->buffer_bytes();
  report.buffer_bytes += ties_.buffer_bytes();
  return report;
}

}  // namespace tessera::zero3
