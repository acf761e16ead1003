#pragma once
// The buffer contract every (host) optimizer checks before touching memory.

#include <span>
#include <string>

#include "tessera/base/error.hpp"
#include "tessera/plugin/optimizer.hpp"

namespace tessera::optimizers {

// Host spans of one step's buffers, after checking them.
struct StepSpans {
  std::span<float> params;
  std::span<const float> grads;
  std::span<float> state;
};

inline StepSpans check_step_spans(const char* optimizer, BufferView param_view,
                                  BufferView grad_view, BufferView state_view,
                                  std::size_t state_per_param, const StepInfo& info) {
  const std::string name(optimizer);
  const auto params = param_view.host_span<float>((name + " parameters").c_str());
  const auto grads = grad_view.host_span<const float>((name + " gradients").c_str());
  const auto state = state_view.host_span<float>((name + " state").c_str());
  TESSERA_CHECK(grads.size() == params.size(),
                std::string(optimizer) + ": " + std::to_string(grads.size()) + " gradients for " +
                    std::to_string(params.size()) + " parameters");
  TESSERA_CHECK(state.size() == state_per_param * params.size(),
                std::string(optimizer) + ": state holds " + std::to_string(state.size()) +
                    " floats, expected " + std::to_string(state_per_param * params.size()));
  TESSERA_CHECK(info.step >= 1, std::string(optimizer) + ": steps count from 1");
  return {params, grads, state};
}

}  // namespace tessera::optimizers
