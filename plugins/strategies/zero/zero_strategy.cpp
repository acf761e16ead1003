#include "zero_strategy.hpp"

#include <algorithm>
#include <cstring>

#include "tessera/base/error.hpp"
#include "tessera/strategy_kit/device_memory.hpp"
#include "tessera/strategy_kit/grad_clip.hpp"
#include "tessera/strategy_kit/gradient_sync.hpp"
#include "tessera/strategy_kit/host_values.hpp"
#include "tessera/strategy_kit/init.hpp"
#include "tessera/strategy_kit/param_checkpoint.hpp"

namespace tessera::zero {

namespace {

ZeroConfig config_from(const Options& options, ZeroStage stage) {
  ZeroConfig config;
  config.stage = stage;
  config.bucket_cap_bytes = options.get_size("bucket_cap");
  config.first_bucket_bytes = options.get_size("first_bucket");
  // zero1 has no staging windows (its gradients live in one full buffer), nor the option.
  if (stage == ZeroStage::two) {
    config.staging_windows = static_cast<std::size_t>(options.get_int("staging_windows"));
  }
  return config;
}

void wait_all(std::vector<std::shared_ptr<Work>>& works, Duration timeout) {
  for (auto& work : works) {
    if (work) work->wait(timeout);
  }
  works.clear();
}

// A destructor cannot report errors; in-flight operations must still land before the buffers
// they write die.
void drain(std::vector<std::shared_ptr<Work>>& works) noexcept {
  for (auto& work : works) {
    if (!work) continue;
    try {
      work->wait();
    } catch (...) {  // NOLINT(bugprone-empty-catch): see above
    }
  }
  works.clear();
}

}  // namespace

ZeroStrategy::ZeroStrategy(const ZeroConfig& config) : config_(config) {
  TESSERA_CHECK(config_.first_bucket_bytes > 0 && config_.bucket_cap_bytes > 0,
                "zero: bucket sizes must be positive");
  if (config_.staging_windows != 1 && config_.staging_windows != 2) {
    throw ConfigError("zero: staging_windows must be 1 or 2, not " +
                      std::to_string(config_.staging_windows));
  }
}
ZeroStrategy::ZeroStrategy(const Options& options, ZeroStage stage)
    : ZeroStrategy(config_from(options, stage)) {}

ZeroStrategy::~ZeroStrategy() {
  drain(reductions_);
  drain(gathers_);
  for (auto& window : windows_) drain(window.reductions);
}

std::size_t ZeroStrategy::state_slots() const {
  return setup_.optimizer->state_per_param();
}

void ZeroStrategy::setup(const StrategySetup& setup) {
  TESSERA_CHECK(setup.world && setup.model && setup.optimizer,
                "zero: setup needs world, model and optimizer");
  TESSERA_CHECK(setup.micro_batches >= 1, "zero: micro_batches must be at least 1");
  allocator_ = strategy_allocator(setup, stage_two() ? "zero2" : "zero1");
  setup_ = setup;
  layout_ = FlatLayout::of(*setup.model);
  TESSERA_CHECK(layout_.total > 0, "zero: the model has no parameters to shard");
  const int world = setup.world->size();
  shards_ = ShardLayout::plan(layout_.total, world, config_.first_bucket_bytes / sizeof(float),
                              config_.bucket_cap_bytes / sizeof(float));
  my_pieces_ = shards_.pieces_of(setup.world->rank());
  const auto exemptions = DecayExemptions::of(layout_);
  piece_exemptions_.clear();
  for (const auto& piece : my_pieces_) {
    piece_exemptions_.push_back(exemptions.within(piece.begin, piece.end));
  }
  // After reconfigure(), the old storage goes before the new is allocated (zero-filled).
  params_ = Tensor();
  grads_ = Tensor();
  state_ = Tensor();
  params_ = Tensor({shards_.padded_total()}, DType::f32, allocator_);
  grads_ =
      Tensor({stage_two() ? shards_.shard_size() : shards_.padded_total()}, DType::f32, allocator_);
  state_ = Tensor({state_slots() * shards_.shard_size()}, DType::f32, allocator_);
  gathers_.assign(shards_.buckets().size(), nullptr);
  // Initialised on the host, then copied where the parameters live.
  const Tensor initial = host_copy(params_);
  const auto params = initial.as<float>();

  // Every rank initialises every parameter (it computes with all of them); each element is a
  // pure function of (seed, parameter index, element index), so all ranks agree bitwise.
  std::size_t window_capacity = 0;
  layers_.clear();
  for (std::size_t l = 0; l < setup.model->layer_count(); ++l) {
    LayerSlice slice;
    const auto specs = setup.model->layer(l).parameters();
    for (std::size_t s = 0; s < specs.size(); ++s) {
      const std::size_t index = layout_.layer_params[l][s];
      const auto& flat = layout_.params[index];
      slice.params.push_back(params_.view().slice(flat.offset, flat.count));
      slice.offsets.push_back(flat.offset);
      slice.counts.push_back(flat.count);
      // A tied parameter is its owner's: its gradient goes through ties_, its range is not this
      // layer's.
      slice.borrowed.push_back(layout_.borrowed(l, s));
      if (slice.borrowed.back()) continue;
      initialize_parameter(specs[s], setup.seed, index, params.subspan(flat.offset, flat.count));
      if (slice.end == slice.begin) slice.begin = flat.offset;
      slice.end = flat.offset + flat.count;
    }
    if (slice.end > slice.begin) {
      const auto& buckets = shards_.buckets();
      const std::size_t lo = buckets[shards_.bucket_of(slice.begin)].begin;
      const std::size_t hi = buckets[shards_.bucket_of(slice.end - 1)].end;
      window_capacity = std::max(window_capacity, hi - lo);
    }
    layers_.push_back(std::move(slice));
  }
  copy_back(initial, params_);
  ties_ = TiedGradients(layout_, allocator_->device());
  // Stage one keeps every layer's gradient in grads_, zeroed before each step: as in ddp, with
  // one micro-batch a borrower adds into its owner's gradient directly (same bits).
  if (!stage_two() && setup.micro_batches == 1) {
    ties_.add_into_owners(flat_gradient_of(layout_, grads_));
  }
  // Allocated (and touched) now, so memory_report() and RSS agree from the first step.
  if (stage_two() && setup.micro_batches == 1) {
    for (std::size_t w = 0; w < config_.staging_windows; ++w) {
      windows_[w].values = Tensor();
      windows_[w].values = Tensor({window_capacity}, DType::f32, allocator_);
    }
  }
}

std::size_t ZeroStrategy::gradient_offset(const ShardPiece& piece) const {
  return stage_two() ? piece.shard_offset : piece.begin;
}

BufferView ZeroStrategy::piece_gradient(const ShardPiece& piece) const {
  return grads_.view().slice(gradient_offset(piece), piece.size());
}

BufferView ZeroStrategy::piece_state(const ShardPiece& piece) const {
  const std::size_t slots = state_slots();
  return state_.view().slice(slots * piece.shard_offset, slots * piece.size());
}

BufferView ZeroStrategy::on_device(float* values, std::size_t count) const {
  return {values, count, DType::f32, allocator_->device()};
}

BufferView ZeroStrategy::piece_params(const ShardPiece& piece) const {
  return params_.view().slice(piece.begin, piece.size());
}

void ZeroStrategy::wait_gathers_below(std::size_t end) {
  // Gathers were issued lowest bucket first (the order forward needs them) and complete in
  // issue order, so waiting from the lowest bucket up never waits out of turn.
  for (std::size_t b = shards_.buckets().size(); b-- > 0;) {
    if (shards_.buckets()[b].begin >= end) break;
    if (auto work = std::move(gathers_[b])) work->wait(setup_.world->timeout());
  }
}

Tensor ZeroStrategy::forward(const Tensor& inputs) {
  const auto layers = model_layers(*setup_.model);
  return evaluate_layers({layers, 0, layers.size()}, placed_in(allocator_, inputs), hooks(false));
}

LayerHooks ZeroStrategy::hooks(bool last) {
  LayerHooks hooks;
  hooks.before_layer = [this](std::size_t l, LayerPass pass) {
    // The first layers compute while the last buckets' updated parameters are still arriving.
    if (pass == LayerPass::forward && layers_[l].end > layers_[l].begin) {
      wait_gathers_below(layers_[l].end);
    }
    return layers_[l].params;
  };
  hooks.gradients = [this](std::size_t l) { return gradient_views(l); };
  // Every bucket above this layer's lowest parameter is now final.
  if (last) {
    hooks.gradient_ready = [this](std::size_t l) {
      if (layers_[l].end > layers_[l].begin) issue_buckets_down_to(layers_[l].begin);
    };
  }
  return hooks;
}

float* ZeroStrategy::prepare_window(const LayerSlice& slice) {
  const auto& buckets = shards_.buckets();
  const std::size_t lo = buckets[shards_.bucket_of(slice.begin)].begin;
  const std::size_t hi = buckets[shards_.bucket_of(slice.end - 1)].end;
  const std::size_t previous = current_window_;
  const std::size_t next = window_open_ && config_.staging_windows == 2 ? 1 - previous : previous;
  auto& window = windows_[next];
  // The window's last use must have finished reducing before it is overwritten: with two
  // windows that was two layers up, with one the layer just above (no overlap).
  wait_all(window.reductions, setup_.world->timeout());
  // The bucket straddling this layer's top edge is partly filled by the layers above; its
  // part moves along (with one window source and destination share the buffer).
  const std::size_t carry = window_open_ && hi > slice.end ? slice.end : hi;
  if (carry < hi) {
    const auto& above = windows_[previous];
    move_values(window.values.view().slice(carry - lo, hi - carry),
                above.values.view().slice(carry - above.begin, hi - carry));
  }
  fill_zero(*allocator_, window.values.view().slice(0, carry - lo));
  window.begin = lo;
  current_window_ = next;
  window_open_ = true;
  return static_cast<float*>(window.values.view().data);
}

void ZeroStrategy::move_values(BufferView dst, BufferView src) const {
  if (dst.count == 0) return;
  if (dst.device == Device::cpu()) {
    std::memmove(dst.data, src.data, dst.bytes());
    return;
  }
  const auto* d = dst.byte_data();
  const auto* s = src.byte_data();
  if (d + dst.bytes() <= s || s + src.bytes() <= d) {
    allocator_->copy(dst, src);
    return;
  }
  // A device copy between overlapping ranges is undefined: through the host.
  Tensor staged({src.count}, DType::f32);
  allocator_->copy(staged.view(), src);
  allocator_->copy(dst, staged.view());
}

std::vector<BufferView> ZeroStrategy::gradient_views(std::size_t layer) {
  const auto& slice = layers_[layer];
  std::vector<BufferView> views(slice.offsets.size());  // borrowed ones: ties_ fills them
  float* base = nullptr;
  std::size_t base_offset = 0;
  if (slice.end > slice.begin) {
    switch (home_) {
      case GradientHome::full: base = static_cast<float*>(grads_.view().data); break;
      case GradientHome::accumulate: base = static_cast<float*>(accumulate_.view().data); break;
      case GradientHome::windows:
        base = prepare_window(slice);
        base_offset = windows_[current_window_].begin;
        break;
    }
  }
  for (std::size_t i = 0; i < slice.offsets.size(); ++i) {
    if (slice.borrowed[i]) continue;
    views[i] = on_device(base + slice.offsets[i] - base_offset, slice.counts[i]);
  }
  ties_.prepare(layer, views);
  return views;
}

void ZeroStrategy::issue_buckets_down_to(std::size_t begin) {
  const auto& buckets = shards_.buckets();
  const int rank = setup_.world->rank();
  const bool alone = setup_.world->size() == 1;
  while (next_bucket_ < buckets.size() && buckets[next_bucket_].begin >= begin) {
    const std::size_t b = next_bucket_++;
    const auto& bucket = buckets[b];
    const std::size_t count = bucket.end - bucket.begin;
    if (!stage_two()) {
      // The average over one rank is the gradient itself.
      if (alone) continue;
      reductions_.push_back(
          setup_.world->all_reduce(grads_.view().slice(bucket.begin, count), ReduceOp::avg));
      continue;
    }
    const auto piece = piece_gradient(shards_.piece(b, rank));
    BufferView input;
    std::vector<std::shared_ptr<Work>>* works = &reductions_;
    if (home_ == GradientHome::windows) {
      auto& window = windows_[current_window_];
      input = window.values.view().slice(bucket.begin - window.begin, count);
      works = &window.reductions;
    } else {
      input = accumulate_.view().slice(bucket.begin, count);
    }
    if (alone) {
      allocator_->copy(piece, input);
      continue;
    }
    works->push_back(setup_.world->reduce_scatter(input, piece, ReduceOp::avg));
  }
}

PassTotals ZeroStrategy::forward_backward(const Tensor& inputs, const Tensor& targets,
                                          float gradient_weight, bool last,
                                          const TrainingDraw& draw) {
  // An empty share of the last batch still walks the layers: it takes part in every bucket's
  // reduction with zero gradients.
  const PassTotals totals = run_model_pass(*setup_.model, placed_in(allocator_, inputs), targets,
                                           hooks(last), gradient_weight, draw);
  if (last) issue_buckets_down_to(0);
  return totals;
}

void ZeroStrategy::wait_reductions() {
  const auto timeout = setup_.world->timeout();
  wait_all(reductions_, timeout);
  for (auto& window : windows_) wait_all(window.reductions, timeout);
}

double ZeroStrategy::clip_shard_gradients() {
  // Each rank sums its own blocks; the others contribute exact zeros there, so the sum
  // all-reduce reproduces every block partial bit for bit and the block-ordered total is ddp's.
  // On a GPU the sums run over a host copy, so they are the host's bits too.
  const Tensor host = host_copy(grads_);
  const auto grads = host.as<float>();
  const auto piece_of = [&](const ShardPiece& piece) {
    return grads.subspan(gradient_offset(piece), piece.size());
  };
  std::vector<double> blocks(shards_.padded_total() / kGradNormBlock, 0.0);
  for (const auto& piece : my_pieces_) accumulate_norm_blocks(piece_of(piece), piece.begin, blocks);
  if (setup_.world->size() > 1) {
    all_reduce_host(*setup_.world, allocator_.get(), view_of(std::span<double>(blocks)),
                    ReduceOp::sum);
  }
  const double sum_of_squares = sum_norm_blocks(blocks);
  const float coefficient =
      clip_coefficient(sum_of_squares, static_cast<float>(setup_.max_grad_norm));
  if (coefficient != 1.0F) {
    for (const auto& piece : my_pieces_) scale_gradients(piece_of(piece), coefficient);
    copy_back(host, grads_);
  }
  return global_norm(sum_of_squares);
}

void ZeroStrategy::gather_parameters() {
  if (setup_.world->size() == 1) return;
  const int rank = setup_.world->rank();
  // Lowest bucket first: the order the next forward needs them. In place: this rank's piece
  // is block `rank` of the bucket.
  for (std::size_t b = shards_.buckets().size(); b-- > 0;) {
    const auto& bucket = shards_.buckets()[b];
    const auto piece = shards_.piece(b, rank);
    gathers_[b] = setup_.world->all_gather(
        piece_params(piece), params_.view().slice(bucket.begin, bucket.end - bucket.begin));
  }
}

StepStats ZeroStrategy::train_step(const Batch& batch, const StepInfo& info) {
  TESSERA_CHECK(!layers_.empty(), "zero: train_step before setup");
  const std::size_t n = batch_rows(batch.inputs);
  const auto world = static_cast<std::size_t>(setup_.world->size());
  const std::size_t global = global_batch_rows(n, world, info, "zero");

  const std::size_t micro =
      std::min<std::size_t>(setup_.micro_batches, std::max<std::size_t>(n, 1));
  if (!stage_two()) {
    home_ = GradientHome::full;
    fill_zero(*allocator_, grads_.view());
  } else if (setup_.micro_batches > 1) {
    home_ = GradientHome::accumulate;
    accumulate_ = Tensor({shards_.padded_total()}, DType::f32, allocator_);  // zero-filled
  } else {
    home_ = GradientHome::windows;
    window_open_ = false;
  }
  next_bucket_ = 0;

  // As in ddp: weighting each micro-batch's mean gradient by world * rows / global makes the
  // average over ranks the mean over the global batch.
  const PassTotals local =
      run_micro_batches(batch, micro, world, global, training_draw(setup_, info),
                        [this](const Tensor& inputs, const Tensor& targets, float weight, bool last,
                               const TrainingDraw& draw) {
                          return forward_backward(inputs, targets, weight, last, draw);
                        });
  LossOverRanks loss(local);
  const auto loss_work = sum_loss_over_ranks(*setup_.world, allocator_.get(), loss);
  wait_reductions();
  if (loss_work) loss_work->wait(setup_.world->timeout());
  if (home_ == GradientHome::accumulate) accumulate_ = Tensor();
  StepStats stats = step_stats(local, loss);
  stats.grad_norm = clip_shard_gradients();
  if (skip_nonfinite_update(setup_, stats)) return stats;  // parameters unchanged everywhere
  const std::size_t slots = state_slots();
  for (std::size_t k = 0; k < my_pieces_.size(); ++k) {
    const auto& piece = my_pieces_[k];
    StepInfo piece_info = info;
    piece_info.no_weight_decay = piece_exemptions_[k];
    setup_.optimizer->step(piece_params(piece), piece_gradient(piece),
                           state_.view().slice(slots * piece.shard_offset, slots * piece.size()),
                           piece_info);
  }
  gather_parameters();
  return stats;
}

StepStats ZeroStrategy::evaluate(const Batch& batch) {
  TESSERA_CHECK(!layers_.empty(), "zero: evaluate before setup");
  StepStats stats;
  const std::size_t n = batch_rows(batch.inputs);
  if (n == 0) return stats;
  Tensor logits = forward(batch.inputs);
  return evaluation_stats(setup_.model->loss(logits, batch.targets));
}

void ZeroStrategy::reconfigure(std::shared_ptr<Communicator> new_world,
                               const CheckpointReader& state) {
  TESSERA_CHECK(setup_.world, "zero: reconfigure before setup");
  // The last step's parameter all-gathers may still be writing params_, on the old world;
  // whatever they leave is overwritten by load().
  drain(reductions_);
  drain(gathers_);
  for (auto& window : windows_) drain(window.reductions);
  auto next = setup_;
  next.world = std::move(new_world);
  setup(next);  // re-plans the shards for the new size; initialises what load() overwrites
  load(state);
}

DataParallelPlacement ZeroStrategy::data_parallel_placement() const {
  TESSERA_CHECK(setup_.world, "zero: data_parallel_placement before setup");
  return {setup_.world->rank(), setup_.world->size(), true};
}

std::span<const float> ZeroStrategy::parameters() {
  wait_gathers_below(shards_.padded_total());
  if (params_.device() == Device::cpu()) return params_.as<float>();
  // One host buffer, refreshed by every call: spans from earlier calls see the new values.
  if (host_params_.count() != params_.count()) host_params_ = Tensor({params_.count()}, DType::f32);
  allocator_->copy(host_params_.view(), params_.view());
  return host_params_.as<float>();
}

std::vector<float> ZeroStrategy::consolidated_optimizer_state() {
  const std::size_t slots = state_slots();
  const auto world = setup_.world->size();
  const Tensor host = host_copy(state_);
  const auto state = host.as<float>();
  std::vector<float> all(state.size() * static_cast<std::size_t>(world));
  if (world > 1) {
    all_gather_host(*setup_.world, allocator_.get(), host.view(), view_of(std::span<float>(all)));
  } else {
    all.assign(state.begin(), state.end());
  }
  std::vector<float> out(slots * layout_.total, 0.0F);
  for (int r = 0; r < world; ++r) {
    for (const auto& piece : shards_.pieces_of(r)) {
      const float* shard = all.data() + static_cast<std::size_t>(r) * state.size();
      const std::size_t end = std::min(piece.end, layout_.total);
      if (end <= piece.begin) continue;
      for (std::size_t s = 0; s < slots; ++s) {
        std::copy_n(shard + slots * piece.shard_offset + s * piece.size(), end - piece.begin,
                    out.begin() + static_cast<std::ptrdiff_t>(s * layout_.total + piece.begin));
      }
    }
  }
  return out;
}

void ZeroStrategy::save(CheckpointWriter& writer) {
  if (setup_.world->rank() == 0) {
    save_param_index(writer, {stage_two() ? "zero2" : "zero1", state_slots(), params_of(layout_),
                              weight_decay_flags(layout_)});
  }
  // This rank's own pieces are final after its update; only other ranks' pieces may still be
  // arriving, and they are not written here. Padding past the last parameter is not saved.
  const Tensor params = host_copy(params_);
  const Tensor state = host_copy(state_);
  const std::size_t slots = state_slots();
  for (const auto& piece : my_pieces_) {
    save_flat_range(writer, layout_, piece.begin, piece.end,
                    params.as<float>().subspan(piece.begin, piece.size()),
                    state.as<float>().subspan(slots * piece.shard_offset, slots * piece.size()),
                    slots);
  }
}

void ZeroStrategy::load(const CheckpointReader& reader) {
  wait_gathers_below(shards_.padded_total());
  // Every parameter (each rank computes with all of them), and this rank's optimizer state.
  const Tensor params = host_copy(params_);
  const Tensor state = host_copy(state_);
  const std::size_t slots = state_slots();
  std::vector<FlatRangeTarget> targets;
  targets.push_back({0, shards_.padded_total(), params.as<float>(), {}});
  for (const auto& piece : my_pieces_) {
    targets.push_back(
        {piece.begin,
         piece.end,
         {},
         state.as<float>().subspan(slots * piece.shard_offset, slots * piece.size())});
  }
  load_flat_ranges(reader, layout_, targets, slots);
  copy_back(params, params_);
  copy_back(state, state_);
}

MemoryReport ZeroStrategy::memory_report() const {
  MemoryReport report;
  report.parameter_bytes = params_.bytes();
  report.gradient_bytes = grads_.bytes();
  report.optimizer_state_bytes = state_.bytes();
  for (const auto& window : windows_) report.buffer_bytes += window.values.bytes();
  report.buffer_bytes += ties_.buffer_bytes();
  return report;
}

}  // namespace tessera::zero
