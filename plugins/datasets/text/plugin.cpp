// The `text` data set.
#include "tessera/sdk/plugin.hpp"

#include "text/text_dataset.hpp"

namespace {

constexpr tessera_option_desc kOptions[] = {
    {"path", "string", "linux-doc-6.1.tokens",
     "token file written by `tessera data prepare` (holds the train/validation split)", nullptr,
     nullptr, nullptr},
    {"context", "int", "256",
     "tokens per sample; a sample is a window of context + 1 tokens, targets shifted by one",
     nullptr, "1", "1048576"},
};

}  // namespace

TESSERA_PLUGIN(dataset, "text", "1.0.0",
               "byte-level text: windows of a prepared token file, next-token targets",
               TESSERA_NO_ALIASES, kOptions, TESSERA_NO_CAPABILITIES, tessera::text::TextDataset)
