// The descriptor of the `attention_lm` model: its kind, name, version, options and class.
#include "tessera/sdk/plugin.hpp"

#include "attention_lm.hpp"

namespace {

constexpr tessera_option_desc kOptions[] = {
    {"blocks", "int", "2", "residual attention blocks", nullptr, "1", "1024"},
    {"heads", "int", "2", "attention heads per block (width must be a multiple)", nullptr, "1",
     "1024"},
    {"width", "int", "64", "channels of the residual stream", nullptr, "1", "65536"},
    {"context", "int", "32", "tokens per sample: the data set's windows must match", nullptr, "1",
     "65536"},
    {"vocab", "int", "256", "token ids in [0, vocab): 256 for byte-level text", nullptr, "2",
     "1048576"},
    {"threads", "int", "1", "compute threads of this rank", nullptr, "1", "1024"},
};

}  // namespace

TESSERA_PLUGIN(model, "attention_lm", "1.0.0",
               "a small attention-only transformer language model (the model template)",
               TESSERA_NO_ALIASES, kOptions, TESSERA_NO_CAPABILITIES, attention_lm::AttentionLm)
