#pragma once
// The span contract every optimizer checks before touching memory.

#include <span>
#include <string>

#include "tessera/base/error.hpp"
#include "tessera/plugin/optimizer.hpp"

namespace tessera::optimizers {

inline void check_step_spans(const char* optimizer, std::span<float> params,
                             std::span<const float> grads, std::span<float> state,
                             std::size_t state_per_param, const StepInfo& info) {
  TESSERA_CHECK(grads.size() == params.size(),
                std::string(optimizer) + ": " + std::to_string(grads.size()) + " gradients for " +
                    std::to_string(params.size()) + " parameters");
  TESSERA_CHECK(state.size() == state_per_param * params.size(),
                std::string(optimizer) + ": state holds " + std::to_string(state.size()) +
                    " floats, expected " + std::to_string(state_per_param * params.size()));
  TESSERA_CHECK(info.step >= 1, std::string(optimizer) + ": steps count from 1");
}

}  // namespace tessera::optimizers
