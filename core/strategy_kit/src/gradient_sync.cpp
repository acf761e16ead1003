#include "tessera/strategy_kit/gradient_sync.hpp"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <numeric>

#if defined(__SSE2__)
#include <emmintrin.h>
#endif

#include "tessera/base/error.hpp"
#include "tessera/strategy_kit/device_memory.hpp"
#include "tessera/strategy_kit/grad_clip.hpp"

namespace tessera {

GradientCompression parse_gradient_compression(const std::string& name) {
  if (name == "none") return GradientCompression::none;
  if (name == "bf16") return GradientCompression::bf16;
  throw InvalidArgument("unknown gradient compression '" + name + "' (valid: none, bf16)");
}

struct GradientSynchronizer::BucketState {
  std::size_t pending = 0;  // gradients not yet ready in this step
  std::shared_ptr<Work> work;
  std::vector<float> staging;       // compression none, gradients not adjacent
  std::vector<std::uint16_t> wire;  // compression bf16
};

GradientSynchronizer::GradientSynchronizer(std::shared_ptr<Communicator> group,
                                           GradientSyncOptions options,
                                           std::shared_ptr<DeviceAllocator> allocator)
    : group_(std::move(group)),
      options_(options),
      allocator_(allocator ? std::move(allocator) : cpu_allocator()),
      device_(allocator_->device()) {
  TESSERA_CHECK(group_ != nullptr, "GradientSynchronizer needs a communicator");
  TESSERA_CHECK(options_.bucket_cap_bytes > 0 && options_.first_bucket_bytes > 0,
                "bucket sizes must be positive");
}

GradientSynchronizer::~GradientSynchronizer() {
  // A bucket still in flight writes into buffers that die with us: let it land first. Errors
  // were (or will never be) reported by wait(); a destructor cannot report them.
  for (auto& state : states_) {
    if (!state || !state->work) continue;
    try {
      state->work->wait();
    } catch (...) {  // NOLINT(bugprone-empty-catch): see above
    }
  }
}

std::size_t GradientSynchronizer::add_parameter(std::string name, std::span<float> param,
                                                std::span<float> grad, bool weight_decay) {
  TESSERA_CHECK(!finalized_, "add_parameter after the bucket plan was frozen: " + name);
  TESSERA_CHECK(param.empty() || param.size() == grad.size(),
                "parameter " + name + " has " + std::to_string(param.size()) +
                    " elements but its gradient " + std::to_string(grad.size()));
  entries_.push_back({std::move(name), param, grad, 0, weight_decay});
  elements_ += grad.size();
  return entries_.size() - 1;
}

void GradientSynchronizer::finalize() {
  if (finalized_) return;
  finalized_ = true;
  // Walk backward (reverse registration order), closing a bucket once it reaches its limit.
  std::size_t bytes = 0;
  for (std::size_t i = entries_.size(); i-- > 0;) {
    if (bytes == 0) buckets_.push_back({i, i, 0, true});
    auto& bucket = buckets_.back();
    bucket.first = i;
    bucket.elements += entries_[i].grad.size();
    entries_[i].bucket = buckets_.size() - 1;
    bytes += entries_[i].grad.size_bytes();
    const std::size_t limit =
        buckets_.size() == 1 ? options_.first_bucket_bytes : options_.bucket_cap_bytes;
    if (bytes >= limit) bytes = 0;
  }
  for (auto& bucket : buckets_) {
    for (std::size_t i = bucket.first; i < bucket.last; ++i) {
      const auto& grad = entries_[i].grad;
      if (grad.data() + grad.size() != entries_[i + 1].grad.data()) bucket.in_place = false;
    }
    // On a device the staging and the compression, which run on the host, have no place.
    if (device_ != Device::cpu() &&
        (!bucket.in_place || options_.compression != GradientCompression::none)) {
      throw InvalidArgument(
          "gradients on " + to_string(device_) +
          " are all-reduced where they lie: they must be adjacent in memory (one flat buffer, "
          "as the ddp strategy keeps them) and compression must be none, not bf16");
    }
    auto state = std::make_unique<BucketState>();
    if (options_.compression == GradientCompression::bf16) {
      state->wire.resize(bucket.elements);
    } else if (!bucket.in_place) {
      state->staging.resize(bucket.elements);
    }
    states_.push_back(std::move(state));
  }
  ready_.assign(entries_.size(), false);
  for (std::size_t b = 0; b < buckets_.size(); ++b) {
    states_[b]->pending = buckets_[b].last - buckets_[b].first + 1;
  }
}

void GradientSynchronizer::grad_ready(std::size_t index) {
  finalize();
  TESSERA_CHECK(index < entries_.size(), "grad_ready: no parameter " + std::to_string(index));
  TESSERA_CHECK(!ready_[index], "grad_ready called twice in one step for " + entries_[index].name);
  ready_[index] = true;
  --states_[entries_[index].bucket]->pending;
  issue_ready_buckets();
}

void GradientSynchronizer::issue_ready_buckets() {
  while (next_to_issue_ < buckets_.size() && states_[next_to_issue_]->pending == 0) {
    const std::size_t b = next_to_issue_++;
    if (group_->size() == 1) continue;  // the average over one rank is the gradient itself
    stage_in(b);
    auto& state = *states_[b];
    BufferView view;
    if (!state.wire.empty()) {
      view = {state.wire.data(), state.wire.size(), DType::bf16, Device::cpu()};
    } else if (!state.staging.empty()) {
      view = view_of(std::span<float>(state.staging));
    } else {
      view = {entries_[buckets_[b].first].grad.data(), buckets_[b].elements, DType::f32, device_};
    }
    state.work = group_->all_reduce(view, ReduceOp::avg);
  }
}

void GradientSynchronizer::stage_in(std::size_t b) {
  auto& state = *states_[b];
  std::size_t offset = 0;
  for (std::size_t i = buckets_[b].first; i <= buckets_[b].last; ++i) {
    const auto grad = entries_[i].grad;
    if (!state.wire.empty()) {
      for (std::size_t j = 0; j < grad.size(); ++j) state.wire[offset + j] = float_to_bf16(grad[j]);
    } else if (!state.staging.empty()) {
      std::memcpy(state.staging.data() + offset, grad.data(), grad.size_bytes());
    }
    offset += grad.size();
  }
}

void GradientSynchronizer::stage_out(std::size_t b) {
  auto& state = *states_[b];
  std::size_t offset = 0;
  for (std::size_t i = buckets_[b].first; i <= buckets_[b].last; ++i) {
    const auto grad = entries_[i].grad;
    if (!state.wire.empty()) {
      for (std::size_t j = 0; j < grad.size(); ++j) grad[j] = bf16_to_float(state.wire[offset + j]);
    } else if (!state.staging.empty()) {
      std::memcpy(grad.data(), state.staging.data() + offset, grad.size_bytes());
    }
    offset += grad.size();
  }
}

void GradientSynchronizer::wait(Duration timeout) {
  finalize();
  for (std::size_t i = 0; i < entries_.size(); ++i) {
    TESSERA_CHECK(ready_[i], "wait: gradient " + entries_[i].name +
                                 " was never marked ready in this step (grad_ready missing)");
  }
  for (std::size_t b = 0; b < buckets_.size(); ++b) {
    auto& state = *states_[b];
    if (!state.work) continue;
    auto work = std::move(state.work);
    work->wait(timeout);
    stage_out(b);
  }
  std::fill(ready_.begin(), ready_.end(), false);
  for (std::size_t b = 0; b < buckets_.size(); ++b) {
    states_[b]->pending = buckets_[b].last - buckets_[b].first + 1;
  }
  next_to_issue_ = 0;
}

std::size_t GradientSynchronizer::buffer_bytes() const noexcept {
  std::size_t bytes = 0;
  for (const auto& state : states_) {
    bytes += state->staging.size() * sizeof(float) + state->wire.size() * sizeof(std::uint16_t);
  }
  return bytes;
}

double GradientSynchronizer::clip_grad_norm(double max_norm) {
  if (device_ != Device::cpu()) return clip_device_grad_norm(max_norm);
  std::vector<double> blocks;
  std::size_t offset = 0;
  for (const auto& entry : entries_) {
    accumulate_norm_blocks(entry.grad, offset, blocks);
    offset += entry.grad.size();
  }
  const double sum_of_squares = sum_norm_blocks(blocks);
  const float coefficient = clip_coefficient(sum_of_squares, static_cast<float>(max_norm));
  for (const auto& entry : entries_) scale_gradients(entry.grad, coefficient);
  return global_norm(sum_of_squares);
}

// The same norm, bit for bit, from a host copy of the gradients (the reference path: one copy
// to the host per step); a clipped copy goes back.
double GradientSynchronizer::clip_device_grad_norm(double max_norm) {
  host_grads_.resize(elements_);
  std::vector<double> blocks;
  std::size_t offset = 0;
  for (const auto& entry : entries_) {
    const std::span<float> host(host_grads_.data() + offset, entry.grad.size());
    allocator_->copy(view_of(host), device_view(entry.grad));
    accumulate_norm_blocks(host, offset, blocks);
    offset += entry.grad.size();
  }
  const double sum_of_squares = sum_norm_blocks(blocks);
  const float coefficient = clip_coefficient(sum_of_squares, static_cast<float>(max_norm));
  if (coefficient < 1.0F) {
    offset = 0;
    for (const auto& entry : entries_) {
      const std::span<float> host(host_grads_.data() + offset, entry.grad.size());
      scale_gradients(host, coefficient);
      allocator_->copy(device_view(entry.grad), view_of(host));
      offset += entry.grad.size();
    }
  }
  return global_norm(sum_of_squares);
}

BufferView GradientSynchronizer::device_view(std::span<float> values) const {
  return {values.data(), values.size(), DType::f32, device_};
}

const Tensor& GradientSynchronizer::prepare_optimizer_state(const Optimizer& optimizer) {
  const std::size_t slots = optimizer.state_per_param();
  if (state_.count() != slots * elements_ || state_per_param_ != slots) {
    state_ = Tensor();  // the old state goes before the new is allocated
    state_ = Tensor({slots * elements_}, DType::f32, allocator_);  // zero-filled
    state_per_param_ = slots;
  }
  return state_;
}

std::span<float> GradientSynchronizer::optimizer_state_for(const Optimizer& optimizer) {
  return prepare_optimizer_state(optimizer).as<float>();
}

template <class Visit>
void GradientSynchronizer::for_each_run(Visit&& visit) const {
  for (std::size_t first = 0; first < entries_.size();) {
    TESSERA_CHECK(!entries_[first].param.empty(),
                  "step: parameter " + entries_[first].name + " was registered without its values");
    std::size_t last = first;
    std::size_t count = entries_[first].grad.size();
    while (last + 1 < entries_.size()) {
      const auto& a = entries_[last];
      const auto& b = entries_[last + 1];
      if (b.param.empty() || a.param.data() + a.param.size() != b.param.data() ||
          a.grad.data() + a.grad.size() != b.grad.data()) {
        break;
      }
      ++last;
      count += b.grad.size();
    }
    visit(first, last, count);
    first = last + 1;
  }
}

DecayExemptions GradientSynchronizer::exemptions_of_run(std::size_t first, std::size_t last) const {
  DecayExemptions exemptions;
  std::size_t at = 0;
  for (std::size_t i = first; i <= last; ++i) {
    const std::size_t count = entries_[i].grad.size();
    if (!entries_[i].weight_decay && count > 0) exemptions.add(at, at + count);
    at += count;
  }
  return exemptions;
}

void GradientSynchronizer::step(const Optimizer& optimizer, const StepInfo& info) {
  (void)prepare_optimizer_state(optimizer);
  const std::size_t slots = optimizer.state_per_param();
  std::size_t state_offset = 0;
  for_each_run([&](std::size_t first, std::size_t last, std::size_t count) {
    const DecayExemptions exemptions = exemptions_of_run(first, last);
    StepInfo run_info = info;
    run_info.no_weight_decay = exemptions.ranges();
    // A run spans several entries: its views start at the first and cover `count` elements.
    optimizer.step(device_view({entries_[first].param.data(), count}),
                   device_view({entries_[first].grad.data(), count}),
                   state_.view().slice(state_offset, slots * count), run_info);
    state_offset += slots * count;
  });
}

double GradientSynchronizer::step_unclipped_and_zero(const Optimizer& optimizer,
                                                     const StepInfo& info) {
  const std::size_t slots = optimizer.state_per_param();
  if (slots > 1 || device_ != Device::cpu()) {
    const double norm = clip_grad_norm(0.0);
    step(optimizer, info);
    for (const auto& entry : entries_) fill_zero(*allocator_, device_view(entry.grad));
    return norm;
  }
  // Chunks end on multiples of kChunk in the flat order, so the norm keeps its interleaved
  // whole-block path; p, g and state of a chunk (384 KiB) stay in L2 across the three uses.
  constexpr std::size_t kChunk = 8 * kGradNormBlock;
  (void)prepare_optimizer_state(optimizer);
  const BufferView state = state_.view();
  std::vector<double> blocks;
  std::size_t flat = 0;
  for_each_run([&](std::size_t first, std::size_t last, std::size_t count) {
    float* param = entries_[first].param.data();
    float* grad = entries_[first].grad.data();
    const DecayExemptions exemptions = exemptions_of_run(first, last);
    for (std::size_t begin = 0; begin < count;) {
      const std::size_t end = std::min(count, (flat + begin) / kChunk * kChunk + kChunk - flat);
      const std::size_t n = end - begin;
      accumulate_norm_blocks({grad + begin, n}, flat + begin, blocks);
      const auto chunk_exemptions = exemptions.within(begin, end);
      StepInfo chunk_info = info;
      chunk_info.no_weight_decay = chunk_exemptions;
      optimizer.step(view_of(std::span<float>(param + begin, n)),
                     view_of(std::span<float>(grad + begin, n)),
                     state.slice(slots * (flat + begin), slots * n), chunk_info);
      std::fill_n(grad + begin, n, 0.0F);
      begin = end;
    }
    flat += count;
  });
  return global_norm(sum_norm_blocks(blocks));
}

namespace {

// Adds v*v of values[0, count) to `sum` in element order: the one summation order the norm
// is defined by.
double add_squares(double sum, const float* values, std::size_t count) noexcept {
  for (std::size_t i = 0; i < count; ++i)
    sum += static_cast<double>(values[i]) * static_cast<double>(values[i]);
  return sum;
}

// The same for kLanes whole blocks at once: each block is still summed in element order, but
// the blocks' dependency chains interleave, so the adds pipeline instead of waiting on each
// other's latency. Bitwise equal to add_squares block by block: SSE2's packed double multiply
// and add round each lane exactly as the scalar operations do.
constexpr std::size_t kLanes = 8;
void add_squares_of_blocks(double* sums, const float* values) noexcept {
#if defined(__SSE2__)
  // Lane pair p holds blocks 2p and 2p+1; four elements of both are loaded, interleaved
  // (unpack) and widened two at a time, and added in element order.
  __m128d acc[kLanes / 2];
  for (std::size_t p = 0; p < kLanes / 2; ++p) acc[p] = _mm_loadu_pd(sums + 2 * p);
  for (std::size_t i = 0; i < kGradNormBlock; i += 4) {
    for (std::size_t p = 0; p < kLanes / 2; ++p) {
      const __m128 a = _mm_loadu_ps(values + (2 * p) * kGradNormBlock + i);
      const __m128 b = _mm_loadu_ps(values + (2 * p + 1) * kGradNormBlock + i);
      const __m128 lo = _mm_unpacklo_ps(a, b);  // a0 b0 a1 b1
      const __m128 hi = _mm_unpackhi_ps(a, b);  // a2 b2 a3 b3
      const __m128d v0 = _mm_cvtps_pd(lo);
      const __m128d v1 = _mm_cvtps_pd(_mm_movehl_ps(lo, lo));
      const __m128d v2 = _mm_cvtps_pd(hi);
      const __m128d v3 = _mm_cvtps_pd(_mm_movehl_ps(hi, hi));
      acc[p] = _mm_add_pd(acc[p], _mm_mul_pd(v0, v0));
      acc[p] = _mm_add_pd(acc[p], _mm_mul_pd(v1, v1));
      acc[p] = _mm_add_pd(acc[p], _mm_mul_pd(v2, v2));
      acc[p] = _mm_add_pd(acc[p], _mm_mul_pd(v3, v3));
    }
  }
  for (std::size_t p = 0; p < kLanes / 2; ++p) _mm_storeu_pd(sums + 2 * p, acc[p]);
#else
  double acc[kLanes];
  for (std::size_t k = 0; k < kLanes; ++k) acc[k] = sums[k];
  for (std::size_t i = 0; i < kGradNormBlock; ++i) {
    for (std::size_t k = 0; k < kLanes; ++k) {
      const auto v = static_cast<double>(values[k * kGradNormBlock + i]);
      acc[k] += v * v;
    }
  }
  for (std::size_t k = 0; k < kLanes; ++k) sums[k] = acc[k];
#endif
}

}  // namespace

void accumulate_norm_blocks(std::span<const float> values, std::size_t flat_offset,
                            std::vector<double>& blocks) {
  if (values.empty()) return;
  const std::size_t last_block = (flat_offset + values.size() - 1) / kGradNormBlock;
  if (blocks.size() <= last_block) blocks.resize(last_block + 1, 0.0);
  for (std::size_t i = 0; i < values.size();) {
    const std::size_t block = (flat_offset + i) / kGradNormBlock;
    const bool at_boundary = (flat_offset + i) % kGradNormBlock == 0;
    if (at_boundary && values.size() - i >= kLanes * kGradNormBlock) {
      add_squares_of_blocks(&blocks[block], values.data() + i);
      i += kLanes * kGradNormBlock;
      continue;
    }
    const std::size_t end = std::min(values.size(), (block + 1) * kGradNormBlock - flat_offset);
    blocks[block] = add_squares(blocks[block], values.data() + i, end - i);
    i = end;
  }
}

double sum_norm_blocks(std::span<const double> blocks) noexcept {
  return std::accumulate(blocks.begin(), blocks.end(), 0.0);
}

}  // namespace tessera
