// A tiny optimizer plugin whose options cover every option type, for the config tests.
#include <span>

#include "tessera/sdk/plugin.hpp"

namespace {

// Plain SGD: params -= lr * grads, so that a test can check the options reached the object.
class ConfigTestSgd final : public tessera::Optimizer {
 public:
  explicit ConfigTestSgd(const tessera::Options& options)
      : lr_(static_cast<float>(options.get_float("lr"))) {}

  [[nodiscard]] std::size_t state_per_param() const noexcept override { return 0; }

  using tessera::Optimizer::step;
  void step(tessera::BufferView param_view, tessera::BufferView grad_view,
            tessera::BufferView /*state*/, const tessera::StepInfo& /*info*/) const override {
    const auto params = param_view.host_span<float>("parameters");
    const auto grads = grad_view.host_span<const float>("gradients");
    for (std::size_t i = 0; i < params.size(); ++i) params[i] -= lr_ * grads[i];
  }

 private:
  float lr_;
};

constexpr tessera_option_desc kOptions[] = {
    {"lr", "float", "0.1", "learning rate", nullptr, "0", "10"},
    {"nesterov", "bool", "false", "Nesterov momentum", nullptr, nullptr, nullptr},
    {"steps", "int", "10", "number of steps", nullptr, "1", "1000"},
    {"bucket", "size", "1MiB", "bucket size", nullptr, "1KiB", "1GiB"},
    {"warmup", "duration", "1s", "warm-up time", nullptr, "0", "1h"},
    {"mode", "string", "fast", "how exact to be", "fast|exact", nullptr, nullptr},
};
constexpr const char* kAliases[] = {"cfgsgd", nullptr};

}  // namespace

TESSERA_PLUGIN(optimizer, "cfg_sgd", "0.1.0", "config-test SGD", kAliases, kOptions,
               TESSERA_NO_CAPABILITIES, ConfigTestSgd)
