#include "hybrid_strategy.hpp"

#include <algorithm>
#include <cstdio>
#include <cstring>

#include "tessera/base/error.hpp"
#include "tessera/strategy_kit/device_memory.hpp"
#include "tessera/strategy_kit/grad_clip.hpp"
#include "tessera/strategy_kit/init.hpp"

namespace tessera::hybrid {

namespace {

using Clock = std::chrono::steady_clock;

// Tags of the pipeline group's point-to-point messages; the micro-batch index is added, so a
// mismatch between stages shows in the tag rather than as wrong numbers.
constexpr std::uint32_t kActivationTag = 1U << 24;
constexpr std::uint32_t kGradientTag = 2U << 24;
constexpr std::uint32_t kNormTag = 3U << 24;

bool parse_recompute(const std::string& name) {
  if (name == "none") return false;
  if (name == "full") return true;
  throw ConfigError("[strategy.hybrid] recompute = " + name + " is not a choice; use none or full");
}

HybridConfig config_from(const Options& options) {
  HybridConfig config;
  config.tensor_parallel = static_cast<int>(options.get_int("tensor_parallel"));
  config.pipeline_parallel = static_cast<int>(options.get_int("pipeline_parallel"));
  config.micro_batches = static_cast<std::size_t>(options.get_int("micro_batches"));
  config.schedule = parse_schedule(options.get_string("schedule"));
  config.partition = parse_partition(options.get_string("partition"));
  config.recompute = parse_recompute(options.get_string("recompute"));
  config.zero1 = options.get_string("data_parallel_sharding") == "zero1";
  config.sync.bucket_cap_bytes = options.get_size("bucket_cap");
  config.sync.first_bucket_bytes = options.get_size("first_bucket");
  return config;
}

double seconds_since(Clock::time_point start) {
  return std::chrono::duration<double>(Clock::now() - start).count();
}

BufferView f64_view(double* data, std::size_t count) {
  return {data, count, DType::f64, Device::cpu()};
}

}  // namespace

HybridStrategy::HybridStrategy(const HybridConfig& config) : config_(config) {}
HybridStrategy::HybridStrategy(const Options& options) : HybridStrategy(config_from(options)) {}
HybridStrategy::~HybridStrategy() = default;

void HybridStrategy::reset() {
  sync_.reset();
  vocabulary_.reset();
  vocabulary_model_ = nullptr;
  plan_.reset();
  groups_.reset();
  params_of_stage_.clear();
  stage_layers_.clear();
  owned_.clear();
  layers_.clear();
  params_ = Tensor();
  grads_ = Tensor();
  state_ = Tensor();
}

void HybridStrategy::setup(const StrategySetup& setup) {
  TESSERA_CHECK(setup.world && setup.model && setup.optimizer,
                "hybrid: setup needs world, model and optimizer");
  TESSERA_CHECK(setup.micro_batches >= 1, "hybrid: micro_batches must be at least 1");
  reset();
  setup_ = setup;
  const Model& model = *setup.model;
  const auto allocator = host_strategy_allocator(setup, "hybrid");

  // Everything that can refuse the configuration comes before the first collective, so every
  // rank throws the same ConfigError instead of some waiting on the others.
  mesh_.emplace(setup.world->size(), config_.tensor_parallel, config_.pipeline_parallel);
  const MeshCoordinates at = mesh_->coordinates(setup.world->rank());
  const auto costs = estimated_layer_costs(model);
  const auto stages =
      partition_layers(costs, static_cast<std::size_t>(mesh_->pipeline_size()), config_.partition);
  stage_ = stages[static_cast<std::size_t>(at.pipeline)];
  roles_ = tensor_parallel_roles(model, mesh_->tensor_size());
  layout_ = FlatLayout::of(model);
  check_tied_slices(model, layout_, roles_, mesh_->tensor_size());
  vocabulary_ = vocabulary_slice_of(model, roles_, {at.tensor, mesh_->tensor_size()});
  if (vocabulary_) {
    vocabulary_model_ = dynamic_cast<const VocabularyParallelModel*>(&model);
    TESSERA_CHECK(vocabulary_model_ != nullptr,
                  "hybrid: a head split by vocabulary in a model without a vocabulary loss");
  }
  if (mesh_->tensor_size() > 1 && setup.world->rank() == 0) {
    std::fprintf(stderr, "%s",
                 describe_tensor_parallel_plan(model, roles_, mesh_->tensor_size()).c_str());
  }

  layers_ = model_layers(model);
  for (std::size_t l = 0; l < layers_.size(); ++l) {
    if (roles_[l] == TensorParallelRole::replicate) continue;
    owned_.push_back(layers_[l]->sliced(roles_[l], {at.tensor, mesh_->tensor_size()}));
    layers_[l] = owned_.back().get();
  }

  groups_ = std::make_unique<MeshGroups>(*setup.world, *mesh_);
  if (mesh_->tensor_size() > 1) {
    plan_ = std::make_unique<TensorParallelPlan>(groups_->tensor, roles_);
    if (vocabulary_) vocabulary_->group = plan_.get();
  }

  // This rank's parameters: its stage's layers' own, sliced where split, in model order; then a
  // copy of each parameter a layer of the stage borrows from a layer of an earlier stage (the
  // last stage's copy of GPT-2's tied embedding), kept equal to the owner's by
  // sum_tied_gradients().
  std::size_t local = 0;
  const auto hold = [&](std::size_t layer, std::size_t index, const ParamSpec& spec, bool copy) {
    const std::size_t count = element_count(spec.shape);
    params_of_stage_.push_back({layer, index, spec, local, count, copy});
    local += count;
  };
  std::vector<std::size_t> copied;  // FlatLayout indices
  for (std::size_t l = stage_.first; l < stage_.last; ++l) {
    const auto specs = layers_[l]->parameters();
    for (std::size_t i = 0; i < specs.size(); ++i) {
      if (!layout_.borrowed(l, i)) hold(l, layout_.layer_params[l][i], specs[i], false);
    }
  }
  own_count_ = local;
  for (std::size_t l = stage_.first; l < stage_.last; ++l) {
    for (std::size_t i = 0; i < layout_.layer_params[l].size(); ++i) {
      const std::size_t index = layout_.layer_params[l][i];
      const std::size_t owner = layout_.params[index].layer;
      if (owner >= stage_.first || std::count(copied.begin(), copied.end(), index) > 0) continue;
      copied.push_back(index);
      const auto& owner_params = layout_.layer_params[owner];
      const auto at_owner = static_cast<std::size_t>(
          std::find(owner_params.begin(), owner_params.end(), index) - owner_params.begin());
      hold(owner, index, layers_[owner]->parameters()[at_owner], true);
    }
  }
  plan_ties(stages);

  local_count_ = local;
  const auto data_size = static_cast<std::size_t>(mesh_->data_size());
  shard_size_ = config_.zero1 && data_size > 1 ? (local + data_size - 1) / data_size : local;
  const std::size_t padded = config_.zero1 && data_size > 1 ? shard_size_ * data_size : local;
  params_ = Tensor({padded}, DType::f32, allocator);
  grads_ = Tensor({padded}, DType::f32, allocator);
  state_ = Tensor({shard_size_ * setup.optimizer->state_per_param()}, DType::f32, allocator);
  const auto values = params_.as<float>();
  const auto grads = grads_.as<float>();
  DecayExemptions exemptions;
  for (auto& p : params_of_stage_) {
    initialize_parameter(p.spec, setup.seed, p.model_index, values.subspan(p.offset, p.count));
    if (!p.spec.weight_decay && p.count > 0) exemptions.add(p.offset, p.offset + p.count);
  }
  shard_exemptions_ = exemptions.within(shard_begin(), shard_begin() + shard_size_);

  if (mesh_->data_size() > 1) {
    sync_ = std::make_unique<GradientSynchronizer>(groups_->data, config_.sync);
  }
  // Each layer's views, in the order of its ParamSpecs; a parameter's gradient is ready for the
  // data group after the backward of the lowest layer of the stage that uses it.
  const auto local_of = [&](std::size_t index) -> const LocalParam& {
    return *std::find_if(params_of_stage_.begin(), params_of_stage_.end(),
                         [&](const LocalParam& p) { return p.model_index == index; });
  };
  stage_layers_.assign(stage_.last - stage_.first, StageLayer{});
  std::vector<std::size_t> lowest_user(layout_.params.size(), SIZE_MAX);
  for (std::size_t l = stage_.last; l-- > stage_.first;) {
    auto& layer = stage_layers_[l - stage_.first];
    for (const std::size_t index : layout_.layer_params[l]) {
      const LocalParam& p = local_of(index);
      layer.params.push_back(view_of(values.subspan(p.offset, p.count)));
      layer.grads.push_back(view_of(grads.subspan(p.offset, p.count)));
      lowest_user[index] = l;
    }
  }
  for (auto& p : params_of_stage_) {
    if (!sync_) break;
    const std::string name = std::to_string(p.layer) + "." + p.spec.name;
    stage_layers_[lowest_user[p.model_index] - stage_.first].sync_indices.push_back(
        sync_->add_parameter(name, values.subspan(p.offset, p.count),
                             grads.subspan(p.offset, p.count)));
  }
  // A tie inside the stage collects what this rank holds of the parameter (a vocabulary slice of
  // wte, split alike in the embedding and the head: check_tied_slices).
  ties_ = TiedGradients(layout_, Device::cpu(), stage_.first, stage_.last,
                        [&](std::size_t index) { return local_of(index).count; });
  if (sync_) sync_->finalize();
  timing_ = PipelineTiming{};
  timing_.stages = static_cast<std::size_t>(mesh_->pipeline_size());
  first_step_done_ = false;
  steps_since_report_ = 0;
}

int HybridStrategy::plan_data_parallel_size(const Model& model, int world_size) const {
  const Mesh mesh(world_size, config_.tensor_parallel, config_.pipeline_parallel);
  (void)partition_layers(estimated_layer_costs(model),
                         static_cast<std::size_t>(mesh.pipeline_size()), config_.partition);
  const auto roles = tensor_parallel_roles(model, mesh.tensor_size());
  check_tied_slices(model, FlatLayout::of(model), roles, mesh.tensor_size());
  (void)vocabulary_slice_of(model, roles, {0, mesh.tensor_size()});
  return mesh.data_size();
}

bool HybridStrategy::sharded() const noexcept {
  return config_.zero1 && mesh_ && mesh_->data_size() > 1;
}

std::size_t HybridStrategy::shard_begin() const noexcept {
  return sharded() ? static_cast<std::size_t>(groups_->at.data) * shard_size_ : 0;
}

const MeshCoordinates& HybridStrategy::coordinates() const {
  TESSERA_CHECK(groups_ != nullptr, "hybrid: coordinates before setup");
  return groups_->at;
}

LayerRange HybridStrategy::range() const {
  LayerRange range{layers_, stage_.first, stage_.last, stage_.first > 0, plan_.get()};
  range.stage = mesh_ ? coordinates().pipeline : -1;  // labels the trace's layer spans
  return range;
}

LayerHooks HybridStrategy::hooks(bool last_micro_batch) {
  LayerHooks hooks;
  hooks.before_layer = [this](std::size_t l, LayerPass) {
    return stage_layers_[l - stage_.first].params;
  };
  hooks.gradients = [this](std::size_t l) {
    auto grads = stage_layers_[l - stage_.first].grads;
    ties_.prepare(l, grads);
    return grads;
  };
  // A layer's gradients are final after the last micro-batch's backward: its bucket's
  // all-reduce over the data group may start while earlier layers still compute.
  if (last_micro_batch && sync_) {
    hooks.gradient_ready = [this](std::size_t l) {
      for (auto index : stage_layers_[l - stage_.first].sync_indices) sync_->grad_ready(index);
    };
  }
  return hooks;
}

Shape HybridStrategy::shape_before(std::size_t layer, std::size_t rows) const {
  Shape shape{rows};
  for (auto d : setup_.model->layout().input_shape) shape.push_back(d);
  for (std::size_t l = 0; l < layer; ++l) shape = layers_[l]->output_shape(shape);
  return shape;
}

// One step's micro-batches: rows of each, their place in the batch and the gradient weight
// that makes the data group's average the mean over the global batch (run_micro_batches' rule,
// so the bits match ddp's).
struct HybridStrategy::MicroBatchPlan {
  std::vector<std::size_t> begin;
  std::vector<std::size_t> rows;
  std::vector<float> weight;

  MicroBatchPlan(std::size_t n, std::size_t count, std::size_t data_size, std::size_t global) {
    std::size_t at = 0;
    for (std::size_t k = 0; k < count; ++k) {
      const std::size_t r = n / count + (k < n % count ? 1 : 0);
      begin.push_back(at);
      rows.push_back(r);
      weight.push_back(
          static_cast<float>(static_cast<double>(data_size * r) / static_cast<double>(global)));
      at += r;
    }
  }
};

StepStats HybridStrategy::train_step(const Batch& batch, const StepInfo& info) {
  TESSERA_CHECK(groups_ != nullptr, "hybrid: train_step before setup");
  const MeshCoordinates& at = groups_->at;
  const auto stages = static_cast<std::size_t>(mesh_->pipeline_size());
  const auto stage = static_cast<std::size_t>(at.pipeline);
  const bool first_stage = stage == 0;
  const bool last_stage = stage + 1 == stages;
  Communicator& pipeline = *groups_->pipeline;

  const std::size_t n = batch_rows(batch.inputs);
  const auto data_size = static_cast<std::size_t>(mesh_->data_size());
  const std::size_t global = global_batch_rows(n, data_size, info, "hybrid");
  const std::size_t wanted =
      config_.micro_batches > 0 ? config_.micro_batches : setup_.micro_batches;
  const std::size_t count = std::min<std::size_t>(wanted, std::max<std::size_t>(n, 1));
  const MicroBatchPlan plan(n, count, data_size, global);
  std::fill_n(grads_.as<float>().data(), grads_.count(), 0.0F);

  const auto micro_batch = [&](const Tensor& tensor, std::size_t k) {
    return count == 1 ? tensor.alias()
                      : slice_rows(tensor, plan.begin[k], plan.begin[k] + plan.rows[k]);
  };

  // Per micro-batch: the stage's input (layers keep aliases of it until backward), its output
  // until sent, the gradient of its output, the gradient of its input until sent. A sent tensor
  // is dropped as soon as its send completes, so a stage holds activations only for the
  // micro-batches its schedule keeps in flight.
  std::vector<MicroBatchContexts> contexts(count);
  std::vector<Tensor> inputs(count);
  std::vector<Tensor> outputs(count);
  std::vector<Tensor> output_grads(count);
  std::vector<Tensor> input_grads(count);
  std::vector<std::pair<std::shared_ptr<Work>, Tensor>> sends;
  const auto send = [&](Tensor& tensor, int peer, std::uint32_t tag) {
    auto work = pipeline.send(tensor.view(), peer, tag);
    sends.emplace_back(std::move(work), std::move(tensor));
  };
  const auto release_sent = [&] {
    std::erase_if(sends, [](auto& in_flight) {
      if (!in_flight.first->test()) return false;
      if (auto error = in_flight.first->exception()) std::rethrow_exception(error);
      return true;
    });
  };
  PassTotals local;
  const LayerRange stage_layers = range();
  // The stage's layers labelled with micro-batch k in the trace (docs/tracing.md), drawing
  // micro-batch k's masks: every stage, and a recomputed forward, draws the same.
  const auto layers = [&](std::size_t k) {
    LayerRange labelled = stage_layers;
    labelled.micro_batch = static_cast<int>(k);
    labelled.training = training_draw(setup_, info, plan.begin[k]);
    return labelled;
  };
  const int previous = static_cast<int>(stage) - 1;
  const int next = static_cast<int>(stage) + 1;

  const auto started = Clock::now();
  double waited = 0.0;
  const auto receive = [&](Tensor& into, int peer, std::uint32_t tag) {
    const auto wait_start = Clock::now();
    pipeline.recv(into.view(), peer, tag)->wait();
    waited += seconds_since(wait_start);
  };

  const auto actions = stage_actions(config_.schedule, stage, stages, count);
  // recompute = full drops a micro-batch's activations only where other work runs before its
  // backward: where the backward comes next (the last stage under 1F1B) there is nothing to save.
  std::vector<bool> recompute(count, false);
  if (config_.recompute) recompute = waits_between_forward_and_backward(actions, count);

  for (const auto& action : actions) {
    const std::size_t k = action.micro_batch;
    const bool has_rows = plan.rows[k] > 0;
    const auto tag = static_cast<std::uint32_t>(k);
    switch (action.kind) {
      case ActionKind::recv_activation:
        if (has_rows) {
          inputs[k] = Tensor(shape_before(stage_.first, plan.rows[k]), DType::f32);
          receive(inputs[k], previous, kActivationTag + tag);
        }
        break;
      case ActionKind::forward: {
        if (first_stage && has_rows) inputs[k] = micro_batch(batch.inputs, k);
        Tensor output = forward_layers(layers(k), inputs[k], hooks(false), contexts[k]);
        if (!last_stage) {
          outputs[k] = std::move(output);
        } else if (has_rows) {
          auto result = loss_of(output, micro_batch(batch.targets, k));
          local.loss_sum += result.loss_sum;
          local.targets += result.targets;
          local.correct += result.correct;
          if (plan.weight[k] != 1.0F)
            scale_gradients(result.grad_logits.as<float>(), plan.weight[k]);
          output_grads[k] = std::move(result.grad_logits);
        }
        // Only the stage's input stays: backward runs the forward again to rebuild the rest.
        if (recompute[k]) contexts[k] = MicroBatchContexts();
        break;
      }
      case ActionKind::send_activation:
        if (has_rows) send(outputs[k], next, kActivationTag + tag);
        outputs[k] = Tensor();
        break;
      case ActionKind::recv_gradient:
        if (has_rows) {
          output_grads[k] = Tensor(shape_before(stage_.last, plan.rows[k]), DType::f32);
          receive(output_grads[k], next, kGradientTag + tag);
        }
        break;
      case ActionKind::backward:
        if (recompute[k]) (void)forward_layers(layers(k), inputs[k], hooks(false), contexts[k]);
        input_grads[k] = backward_layers(layers(k), std::move(output_grads[k]),
                                         hooks(k + 1 == count), contexts[k]);
        inputs[k] = Tensor();
        break;
      case ActionKind::send_gradient:
        if (has_rows) send(input_grads[k], previous, kGradientTag + tag);
        input_grads[k] = Tensor();
        break;
    }
    release_sent();
  }
  for (auto& in_flight : sends) in_flight.first->wait();
  if (first_step_done_) {
    timing_.pipeline_seconds += seconds_since(started);
    timing_.recv_wait_seconds += waited;
    ++timing_.steps;
  } else {
    first_step_done_ = true;
    ++timing_.untimed_steps;
  }
  timing_.micro_batches = count;
  ++steps_since_report_;

  // The loss is summed over the data group after every gradient bucket, as ddp orders it.
  LossOverRanks loss(local);
  const auto loss_work = last_stage ? sum_loss_over_ranks(*groups_->data, loss) : nullptr;
  if (sync_) sync_->wait(groups_->data->timeout());
  if (loss_work) loss_work->wait();
  sum_tied_gradients();

  // The last stage holds the loss and the complete sum of squares; every stage gets both.
  enum : std::size_t { kLossSum, kTargets, kSumOfSquares, kTotals };
  double totals[kTotals] = {loss.sums[0], loss.sums[1], last_stage_sum_of_squares()};
  if (stages > 1) {
    pipeline.broadcast(f64_view(totals, kTotals), static_cast<int>(stages) - 1)->wait();
  }
  loss.sums[0] = totals[kLossSum];
  loss.sums[1] = totals[kTargets];

  StepStats stats = step_stats(last_stage ? local : PassTotals{}, loss);
  stats.grad_norm = global_norm(totals[kSumOfSquares]);
  if (skip_nonfinite_update(setup_, stats)) return stats;
  // With zero1 each data rank updates its shard (padding included: zero parameters with zero
  // gradients stay zero under an element-wise optimizer) and the group gathers the rest.
  const auto shard = [&](const Tensor& t) {
    return t.as<float>().subspan(shard_begin(), shard_size_);
  };
  scale_gradients(shard(grads_), clip_coefficient(totals[kSumOfSquares],
                                                  static_cast<float>(setup_.max_grad_norm)));
  if (shard_size_ > 0) {
    StepInfo shard_info = info;
    shard_info.no_weight_decay = shard_exemptions_;
    setup_.optimizer->step(shard(params_), shard(grads_), state_.as<float>(), shard_info);
  }
  if (sharded()) {
    groups_->data->all_gather(view_of(shard(params_)), params_.view())->wait();
  }
  return stats;
}

double HybridStrategy::last_stage_sum_of_squares() {
  const auto stages = static_cast<std::size_t>(mesh_->pipeline_size());
  const auto stage = static_cast<std::size_t>(groups_->at.pipeline);
  Communicator& pipeline = *groups_->pipeline;
  // Copies of tied parameters (after own_count_) count on their owner's stage.
  const auto grads = grads_.as<float>().first(own_count_);

  if (mesh_->tensor_size() == 1) {
    // ddp's blocks over the whole model's flat order, carried from stage to stage: a block cut
    // by a stage boundary goes on summing where the previous stage stopped, so the norm has
    // ddp's bits.
    std::vector<double> blocks((layout_.total + kGradNormBlock - 1) / kGradNormBlock, 0.0);
    if (stage > 0) {
      pipeline.recv(f64_view(blocks.data(), blocks.size()), static_cast<int>(stage) - 1, kNormTag)
          ->wait();
    }
    const std::size_t offset =
        own_count_ == 0 ? 0 : layout_.params[params_of_stage_.front().model_index].offset;
    accumulate_norm_blocks(grads, offset, blocks);
    if (stage + 1 < stages) {
      pipeline.send(f64_view(blocks.data(), blocks.size()), static_cast<int>(stage) + 1, kNormTag)
          ->wait();
    }
    return sum_norm_blocks(blocks);
  }

  // Split parameters count on every tensor rank (each holds its slice), replicated ones on
  // tensor rank 0 only; the tensor group sums them, the pipeline adds stage after stage.
  std::vector<double> blocks;
  std::size_t counted = 0;
  for (const auto& p : params_of_stage_) {
    if ((p.spec.slice.whole() && groups_->at.tensor != 0) || p.copy) continue;
    accumulate_norm_blocks(grads.subspan(p.offset, p.count), counted, blocks);
    counted += p.count;
  }
  double sum[2] = {sum_norm_blocks(blocks), 0.0};
  groups_->tensor->all_reduce(f64_view(sum, 1), ReduceOp::sum)->wait();
  if (stage > 0) {
    pipeline.recv(f64_view(sum + 1, 1), static_cast<int>(stage) - 1, kNormTag)->wait();
  }
  sum[1] += sum[0];
  if (stage + 1 < stages) {
    pipeline.send(f64_view(sum + 1, 1), static_cast<int>(stage) + 1, kNormTag)->wait();
  }
  return sum[1];
}

StepStats HybridStrategy::evaluate(const Batch& batch) {
  TESSERA_CHECK(groups_ != nullptr, "hybrid: evaluate before setup");
  if (steps_since_report_ > 0) report_bubble();
  const auto stages = static_cast<std::size_t>(mesh_->pipeline_size());
  const auto stage = static_cast<std::size_t>(groups_->at.pipeline);
  Communicator& pipeline = *groups_->pipeline;
  StepStats stats;
  const std::size_t n = batch_rows(batch.inputs);
  if (n == 0) return stats;  // every stage of the replica sees the same empty share

  Tensor input;
  if (stage == 0) {
    input = batch.inputs.alias();
  } else {
    input = Tensor(shape_before(stage_.first, n), DType::f32);
    pipeline.recv(input.view(), static_cast<int>(stage) - 1, kActivationTag)->wait();
  }
  Tensor output = evaluate_layers(range(), input, hooks(false));
  if (stage + 1 < stages) {
    pipeline.send(output.view(), static_cast<int>(stage) + 1, kActivationTag)->wait();
    return stats;
  }
  return evaluation_stats(loss_of(output, batch.targets));
}

LossResult HybridStrategy::loss_of(const Tensor& logits, const Tensor& targets) const {
  if (vocabulary_) {
    return vocabulary_model_->loss_over_vocabulary_slice(logits, targets, *vocabulary_);
  }
  return setup_.model->loss(logits, targets);
}

PipelineTiming HybridStrategy::take_pipeline_timing() {
  PipelineTiming taken = timing_;
  timing_ = PipelineTiming{};
  timing_.stages = taken.stages;
  return taken;
}

void HybridStrategy::report_bubble() {
  // Collective over the world: every rank has run the same steps, so all arrive here together.
  steps_since_report_ = 0;
  const PipelineTiming timing = take_pipeline_timing();
  if (timing.stages < 2) return;
  Communicator& world = *setup_.world;
  double mine[2] = {timing.recv_wait_seconds, timing.pipeline_seconds};
  std::vector<double> all(2 * static_cast<std::size_t>(world.size()));
  world.all_gather(f64_view(mine, 2), f64_view(all.data(), all.size()))->wait();
  if (world.rank() != 0) return;
  if (timing.steps == 0) {
    std::fprintf(stderr,
                 "hybrid: pipeline bubble not measured yet: the first step after setup pays "
                 "one-time costs and is not timed\n");
    return;
  }
  // Per stage, the mean over its ranks; the line gives the mean over stages and each stage.
  std::vector<double> waited(timing.stages, 0.0);
  std::vector<double> total(timing.stages, 0.0);
  for (int r = 0; r < world.size(); ++r) {
    const auto s = static_cast<std::size_t>(mesh_->coordinates(r).pipeline);
    waited[s] += all[2 * static_cast<std::size_t>(r)];
    total[s] += all[2 * static_cast<std::size_t>(r) + 1];
  }
  std::string stages_text;
  double sum = 0.0;
  for (std::size_t s = 0; s < timing.stages; ++s) {
    const double fraction = total[s] > 0.0 ? waited[s] / total[s] : 0.0;
    sum += fraction;
    char part[48];
    std::snprintf(part, sizeof part, "%s%.1f %%", s == 0 ? "" : ", ", 100.0 * fraction);
    stages_text += part;
  }
  std::fprintf(stderr,
               "hybrid: pipeline bubble over %zu steps%s: measured %.1f %% (stages: %s), "
               "theoretical (pp-1)/(m+pp-1) = %.1f %% (pp %zu, m %zu, %s)\n",
               timing.steps, timing.untimed_steps > 0 ? " (the first, untimed, not counted)" : "",
               100.0 * sum / static_cast<double>(timing.stages), stages_text.c_str(),
               100.0 * timing.theoretical(), timing.stages, timing.micro_batches,
               schedule_name(config_.schedule));
}

std::vector<HybridStrategy::HeldParameter> HybridStrategy::held_parameters() const {
  std::vector<HeldParameter> held;
  const auto values = params_.as<float>();
  for (const auto& p : params_of_stage_) {
    held.push_back({p.layer, p.spec, values.subspan(p.offset, p.count)});
  }
  return held;
}

DataParallelPlacement HybridStrategy::data_parallel_placement() const {
  TESSERA_CHECK(groups_ != nullptr, "hybrid: data_parallel_placement before setup");
  const auto& at = groups_->at;
  return {at.data, mesh_->data_size(), at.pipeline + 1 == mesh_->pipeline_size() && at.tensor == 0};
}

MemoryReport HybridStrategy::memory_report() const {
  MemoryReport report;
  report.parameter_bytes = params_.bytes();
  report.gradient_bytes = grads_.bytes();
  report.optimizer_state_bytes = state_.bytes();
  if (sync_) report.buffer_bytes = sync_->buffer_bytes();
  return report;
}

void HybridStrategy::reconfigure(std::shared_ptr<Communicator> new_world,
                                 const CheckpointReader& state) {
  TESSERA_CHECK(groups_ != nullptr, "hybrid: reconfigure before setup");
  // A step waits for all its communication, so nothing is in flight on the old groups here.
  auto next = setup_;
  next.world = std::move(new_world);
  reset();
  setup(next);
  load(state);
}

}  // namespace tessera::hybrid
