#pragma once
// `tessera sample --config FILE --checkpoint PATH [--prompt TEXT] [--tokens N]
// [--temperature T] [--top-k K] [--seed S] [--section.key=value ...]`: text from a trained
// language model, so that a person sees what it learned.

#include <string>
#include <vector>

namespace tessera::cli {

// `args` are the words after "sample". The config's [train] model (with its options) is built,
// its parameters are read whole from the checkpoint (a folder, or a root whose newest checkpoint
// is taken; written by any strategy at any world size), and `tokens` byte-level tokens follow the
// prompt: greedy at temperature 0, else drawn from the softmax of logits / temperature over the
// top_k most likely (0: all), by a counter-based generator seeded with `seed` (the same text for
// the same arguments). Prints the prompt and what follows to stdout; returns 0. Throws
// UsageError for bad arguments, ConfigError for a model whose samples are not token ids or whose
// vocabulary cannot hold a prompt byte, CheckpointError for a checkpoint that lacks a parameter
// of the model or holds it in another shape.
int run_sample(const std::vector<std::string>& args);

}  // namespace tessera::cli
