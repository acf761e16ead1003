// The `mlp` model: Linear/activation layers sized by the config, softmax cross-entropy loss.
#include "tessera/sdk/plugin.hpp"

#include "mlp/mlp_model.hpp"

namespace {

constexpr tessera_option_desc kOptions[] = {
    {"layers", "string", "784,256,256,10", "comma-separated layer sizes: input, hidden..., classes",
     nullptr, nullptr, nullptr},
    {"activation", "string", "relu", "activation between Linear layers", "relu|gelu", nullptr,
     nullptr},
    {"threads", "int", "1",
     "compute threads of this rank (oneTBB arena and OpenBLAS pool, which is process-wide)",
     nullptr, "1", "1024"},
};

}  // namespace

TESSERA_PLUGIN(model, "mlp", "1.0.0", "multi-layer perceptron with softmax cross-entropy",
               TESSERA_NO_ALIASES, kOptions, TESSERA_NO_CAPABILITIES, tessera::mlp::MlpModel)
