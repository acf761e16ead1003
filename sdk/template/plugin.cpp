// The plugin's descriptor: kind, name, version, description, aliases, options and the class.
#include "tessera/sdk/plugin.hpp"

#include "sign_sgd.hpp"

namespace {

// name, type (bool|int|float|string|size|duration), default (nullptr: required), help,
// choices ("a|b|c" or nullptr). They become the [optimizer.sign_sgd] section of a config.
constexpr tessera_option_desc kOptions[] = {
    {"weight_decay", "float", "0", "decoupled weight decay, multiplied by the learning rate",
     nullptr, "0", nullptr},
};

constexpr const char* kAliases[] = {"signsgd", nullptr};

}  // namespace

TESSERA_PLUGIN(optimizer, "sign_sgd", "1.0.0", "signSGD: steps by the sign of the gradient",
               kAliases, kOptions, TESSERA_NO_CAPABILITIES, my_plugin::SignSgd)
