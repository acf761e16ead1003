#pragma once
// The buffer contract every optimizer checks before touching memory.

#include <span>
#include <string>
#include <utility>
#include <vector>

#include "device_update.hpp"
#include "tessera/base/error.hpp"
#include "tessera/plugin/optimizer.hpp"

namespace tessera::optimizers {

// Host spans of one step's buffers, after checking them.
struct StepSpans {
  std::span<float> params;
  std::span<const float> grads;
  std::span<float> state;
};

// An empty view touches no memory, whatever device it says (see step_device).
template <class T>
std::span<T> host_span_of(BufferView view, const std::string& what) {
  if (view.count == 0) return {};
  return view.host_span<T>(what.c_str());
}

inline StepSpans check_step_spans(const char* optimizer, BufferView param_view,
                                  BufferView grad_view, BufferView state_view,
                                  std::size_t state_per_param, const StepInfo& info) {
  const std::string name(optimizer);
  const auto params = host_span_of<float>(param_view, name + " parameters");
  const auto grads = host_span_of<const float>(grad_view, name + " gradients");
  const auto state = host_span_of<float>(state_view, name + " state");
  TESSERA_CHECK(grads.size() == params.size(),
                std::string(optimizer) + ": " + std::to_string(grads.size()) + " gradients for " +
                    std::to_string(params.size()) + " parameters");
  TESSERA_CHECK(state.size() == state_per_param * params.size(),
                std::string(optimizer) + ": state holds " + std::to_string(state.size()) +
                    " floats, expected " + std::to_string(state_per_param * params.size()));
  TESSERA_CHECK(info.step >= 1, std::string(optimizer) + ": steps count from 1");
  return {params, grads, state};
}

// The device one step computes on, after the checks that do not read memory: f32 views, the
// counts state_per_param asks for, steps from 1, and every non-empty view on one device that
// this build updates (runs_on). An empty view touches no memory, so its device does not matter
// (a strategy's state slice for an sgd without momentum). Throws InvalidArgument naming the
// optimizer and the views.
inline Device step_device(const char* optimizer, BufferView params, BufferView grads,
                          BufferView state, std::size_t state_per_param, const StepInfo& info) {
  const std::string name(optimizer);
  const std::pair<const char*, const BufferView*> views[] = {
      {"parameters", &params}, {"gradients", &grads}, {"state", &state}};
  for (const auto& [what, view] : views) {
    TESSERA_CHECK(
        view->dtype == DType::f32,
        name + " " + what + " are " + std::string(dtype_name(view->dtype)) + ", expected f32");
  }
  TESSERA_CHECK(grads.count == params.count, name + ": " + std::to_string(grads.count) +
                                                 " gradients for " + std::to_string(params.count) +
                                                 " parameters");
  TESSERA_CHECK(state.count == state_per_param * params.count,
                name + ": state holds " + std::to_string(state.count) + " floats, expected " +
                    std::to_string(state_per_param * params.count));
  TESSERA_CHECK(info.step >= 1, name + ": steps count from 1");
  const BufferView* first = nullptr;
  const char* first_what = nullptr;
  for (const auto& [what, view] : views) {
    if (view->count == 0) continue;
    if (first == nullptr) {
      first = view;
      first_what = what;
    } else if (view->device != first->device) {
      throw InvalidArgument(name + ": " + first_what + " are on " + to_string(first->device) +
                            " but " + what + " on " + to_string(view->device) +
                            "; one step updates buffers of one device");
    }
  }
  const Device device = first == nullptr ? Device::cpu() : first->device;
  if (device != Device::cpu() && !updates_on(device)) {
    throw InvalidArgument(name + ": cannot update buffers on " + to_string(device) +
                          " (Optimizer::runs_on is false for it); keep the optimizer's buffers "
                          "on the host or on a CUDA device this process sees, in a build with "
                          "CUDA");
  }
  return device;
}

// The buffers of a step on `device` (from step_device), after checking that each view's memory
// really lies there.
inline DeviceStep device_step(const char* optimizer, Device device, BufferView params,
                              BufferView grads, BufferView state) {
  const std::string name(optimizer);
  if (params.count > 0) require_device_memory(params, name + " parameters");
  if (grads.count > 0) require_device_memory(grads, name + " gradients");
  if (state.count > 0) require_device_memory(state, name + " state");
  return {device,
          static_cast<float*>(params.data),
          static_cast<const float*>(grads.data),
          static_cast<float*>(state.data),
          params.count,
          params.count};
}

// A stretch [begin, end) of one step's elements under one weight-decay rule.
struct DecaySegment {
  std::size_t begin = 0;
  std::size_t end = 0;
  bool decays = true;
};

// The segments that cover [0, n) in order: each of info.no_weight_decay with decays = false, the
// gaps between them with decays = true (so no ranges: one segment, all decaying). Throws
// InvalidArgument, naming the optimizer and the range, for ranges that are empty, unsorted,
// overlapping or past n: a strategy's mistake that would otherwise decay the wrong elements.
inline std::vector<DecaySegment> decay_segments(const char* optimizer, std::size_t n,
                                                const StepInfo& info) {
  std::vector<DecaySegment> segments;
  std::size_t at = 0;
  for (const auto& r : info.no_weight_decay) {
    if (r.begin < at || r.end <= r.begin || r.end > n) {
      throw InvalidArgument(std::string(optimizer) + ": the weight-decay exemption [" +
                            std::to_string(r.begin) + ", " + std::to_string(r.end) +
                            ") is empty, out of order or past the " + std::to_string(n) +
                            " elements of this step");
    }
    if (r.begin > at) segments.push_back({at, r.begin, true});
    segments.push_back({r.begin, r.end, false});
    at = r.end;
  }
  if (at < n || segments.empty()) segments.push_back({at, n, true});
  return segments;
}

// Elements [segment.begin, segment.end) of a device step: the same buffers, each state slot
// still slot_stride apart.
inline DeviceStep segment_of(const DeviceStep& step, const DecaySegment& segment) {
  DeviceStep part = step;
  part.params += segment.begin;
  part.grads += segment.begin;
  if (part.state != nullptr) part.state += segment.begin;
  part.n = segment.end - segment.begin;
  return part;
}

}  // namespace tessera::optimizers
