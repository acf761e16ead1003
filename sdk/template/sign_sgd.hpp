#pragma once
// signSGD (Bernstein et al., 2018): each parameter moves by the learning rate against the sign
// of its gradient, with optional decoupled weight decay. Stateless, so any strategy can shard it.

#include <cstddef>
#include <span>

#include "tessera/plugin/optimizer.hpp"
#include "tessera/plugin/options.hpp"

namespace my_plugin {

class SignSgd final : public tessera::Optimizer {
 public:
  // Reads the options declared in plugin.cpp; the registry has already validated their types.
  explicit SignSgd(const tessera::Options& options);

  [[nodiscard]] std::size_t state_per_param() const noexcept override { return 0; }
  using tessera::Optimizer::step;
  void step(tessera::BufferView params, tessera::BufferView grads, tessera::BufferView state,
            const tessera::StepInfo& info) const override;

 private:
  float weight_decay_;
};

}  // namespace my_plugin
