// The `rmsprop` optimizer.
#include "tessera/sdk/plugin.hpp"

#include "rmsprop/rmsprop.hpp"

namespace tessera::rmsprop {
namespace {

RmspropConfig config_from(const Options& options) {
  RmspropConfig config;
  config.alpha = static_cast<float>(options.get_float("alpha"));
  config.eps = static_cast<float>(options.get_float("eps"));
  config.weight_decay = static_cast<float>(options.get_float("weight_decay"));
  config.momentum = static_cast<float>(options.get_float("momentum"));
  config.centered = options.get_bool("centered");
  return config;
}

}  // namespace

RmspropOptimizer::RmspropOptimizer(const Options& options)
    : RmspropOptimizer(config_from(options)) {}

}  // namespace tessera::rmsprop

namespace {

constexpr tessera_option_desc kOptions[] = {
    {"alpha", "float", "0.99", "decay of the squared-gradient average", nullptr, "0", "1"},
    {"eps", "float", "1e-8", "added to the denominator for stability", nullptr, "1e-30", "1"},
    {"weight_decay", "float", "0", "L2 penalty added to the gradient", nullptr, "0", nullptr},
    {"momentum", "float", "0", "momentum factor (0: no momentum buffer)", nullptr, "0", nullptr},
    {"centered", "bool", "false", "normalise by the gradient's estimated variance", nullptr,
     nullptr, nullptr},
};

}  // namespace

TESSERA_PLUGIN(optimizer, "rmsprop", "1.0.0", "RMSprop, optionally centered, with momentum",
               TESSERA_NO_ALIASES, kOptions, TESSERA_NO_CAPABILITIES,
               tessera::rmsprop::RmspropOptimizer)
