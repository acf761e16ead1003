// The `local_sgd` strategy: declared with the same macro as every in-tree plugin.
#include "tessera/sdk/plugin.hpp"

#include "local_sgd_strategy.hpp"

namespace {

constexpr tessera_option_desc kOptions[] = {
    {"sync_every", "int", "8",
     "average the parameters over all ranks every this many optimizer steps (1: every step)",
     nullptr, "1", nullptr},
};

}  // namespace

TESSERA_PLUGIN(strategy, "local_sgd", "1.0.0",
               "Local SGD: ranks step alone, parameters averaged every sync_every steps",
               TESSERA_NO_ALIASES, kOptions, TESSERA_NO_CAPABILITIES, acme::LocalSgdStrategy)
