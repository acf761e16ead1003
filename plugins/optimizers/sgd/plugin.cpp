// The `sgd` optimizer.
#include "tessera/sdk/plugin.hpp"

#include "sgd/sgd.hpp"

namespace tessera::sgd {
namespace {

SgdConfig config_from(const Options& options) {
  SgdConfig config;
  config.momentum = static_cast<float>(options.get_float("momentum"));
  config.dampening = static_cast<float>(options.get_float("dampening"));
  config.weight_decay = static_cast<float>(options.get_float("weight_decay"));
  config.nesterov = options.get_bool("nesterov");
  return config;
}

}  // namespace

SgdOptimizer::SgdOptimizer(const Options& options) : SgdOptimizer(config_from(options)) {}

}  // namespace tessera::sgd

namespace {

constexpr tessera_option_desc kOptions[] = {
    {"momentum", "float", "0", "momentum factor (0: plain SGD, no state)", nullptr, "0", nullptr},
    {"dampening", "float", "0", "dampening of the gradient added to the momentum buffer", nullptr,
     "0", "1"},
    {"weight_decay", "float", "0", "L2 penalty added to the gradient", nullptr, "0", nullptr},
    {"nesterov", "bool", "false", "Nesterov momentum (needs momentum > 0, dampening 0)", nullptr,
     nullptr, nullptr},
};

}  // namespace

TESSERA_PLUGIN(optimizer, "sgd", "1.0.0", "SGD with momentum, Nesterov and weight decay",
               TESSERA_NO_ALIASES, kOptions, TESSERA_NO_CAPABILITIES, tessera::sgd::SgdOptimizer)
