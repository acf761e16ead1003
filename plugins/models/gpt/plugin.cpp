// The `gpt` model: GPT-2's architecture (learned positions, pre-norm blocks, causal attention,
// GELU MLP, final layer norm, output head), softmax cross-entropy per next token.
#include "tessera/sdk/plugin.hpp"

#include "gpt/gpt_model.hpp"

namespace {

constexpr tessera_option_desc kOptions[] = {
    {"layers", "int", "4", "transformer blocks", nullptr, "1", "1024"},
    {"heads", "int", "4", "attention heads per block (width must be a multiple)", nullptr, "1",
     "1024"},
    {"width", "int", "128", "channels of the residual stream (GPT-2 small: 768)", nullptr, "1",
     "65536"},
    {"context", "int", "64", "tokens per sample: the data set's windows must match", nullptr, "1",
     "65536"},
    {"vocab", "int", "256", "token ids in [0, vocab): 256 for byte-level text", nullptr, "2",
     "1048576"},
    {"tie_embeddings", "bool", "true",
     "the output head uses the token embedding wte (GPT-2); false: a matrix of its own", nullptr,
     nullptr, nullptr},
    {"dropout", "float", "0",
     "share zeroed in training after the embedding, of the attention probabilities and after "
     "each attention and MLP output (nanoGPT's places); in [0, 1), 0 off; evaluation and "
     "sampling never drop",
     nullptr, "0", nullptr},
    {"attention_dropout", "string", "",
     "share of the attention probabilities zeroed in training (GPT-2's attn_pdrop), in [0, 1); "
     "empty: dropout's rate",
     nullptr, nullptr, nullptr},
    {"decay_all", "bool", "false",
     "weight decay on every parameter (PyTorch's plain AdamW); false: the matrices only "
     "(nanoGPT: not biases, layer norms, wte, wpe)",
     nullptr, nullptr, nullptr},
    {"threads", "int", "1",
     "compute threads of this rank (oneTBB arena and OpenBLAS pool, which is process-wide)",
     nullptr, "1", "1024"},
};

}  // namespace

TESSERA_PLUGIN(model, "gpt", "1.0.0", "GPT-2 style transformer language model", TESSERA_NO_ALIASES,
               kOptions, TESSERA_NO_CAPABILITIES, tessera::gpt::GptModel)
