#include "sign_sgd.hpp"

#include "tessera/base/error.hpp"

namespace my_plugin {

SignSgd::SignSgd(const tessera::Options& options)
    : weight_decay_(static_cast<float>(options.get_float("weight_decay"))) {
  // Throw tessera's errors: the host rethrows them with their type across the plugin boundary.
  TESSERA_CHECK(weight_decay_ >= 0.0F, "sign_sgd: weight_decay must not be negative");
}

void SignSgd::step(tessera::BufferView param_view, tessera::BufferView grad_view,
                   tessera::BufferView /*state*/, const tessera::StepInfo& info) const {
  // Host memory only (runs_on keeps the default): host_span throws for device buffers.
  const auto params = param_view.host_span<float>("sign_sgd parameters");
  const auto grads = grad_view.host_span<const float>("sign_sgd gradients");
  TESSERA_CHECK(grads.size() == params.size(), "sign_sgd: as many gradients as parameters");
  const float lr = info.learning_rate;
  // Weight decay is per parameter: the strategy lists the elements it must skip (biases, norms,
  // embeddings), sorted ranges of this step's views.
  auto exempt = info.no_weight_decay.begin();
  for (std::size_t i = 0; i < params.size(); ++i) {
    while (exempt != info.no_weight_decay.end() && exempt->end <= i) ++exempt;
    const bool decays = exempt == info.no_weight_decay.end() || i < exempt->begin;
    const float sign = grads[i] > 0.0F ? 1.0F : (grads[i] < 0.0F ? -1.0F : 0.0F);
    params[i] -= lr * (sign + (decays ? weight_decay_ : 0.0F) * params[i]);
  }
}

}  // namespace my_plugin
