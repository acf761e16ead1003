// The `adam` optimizer.
#include "adam/adam.hpp"
#include "tessera/sdk/plugin.hpp"

namespace {

class AdamPlugin final : public tessera::adam::AdamOptimizer {
 public:
  explicit AdamPlugin(const tessera::Options& options)
      : AdamOptimizer(tessera::adam::adam_config_from(options, false)) {}
};

constexpr tessera_option_desc kOptions[] = {
    {"beta1", "float", "0.9", "decay of the first-moment average", nullptr, "0", "0.999999"},
    {"beta2", "float", "0.999", "decay of the second-moment average", nullptr, "0", "0.999999"},
    {"eps", "float", "1e-8", "added to the denominator for stability", nullptr, "1e-30", "1"},
    {"weight_decay", "float", "0", "L2 penalty added to the gradient", nullptr, "0", nullptr},
};

}  // namespace

TESSERA_PLUGIN(optimizer, "adam", "1.0.0", "Adam with L2 weight decay", TESSERA_NO_ALIASES,
               kOptions, TESSERA_NO_CAPABILITIES, AdamPlugin)
