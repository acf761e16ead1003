#pragma once
// `tessera train`: trains the config's model with its strategy over N ranks.

#include <string>
#include <vector>

namespace tessera::cli {

// `args` are the words after "train". Returns the process exit code.
int run_train(const std::vector<std::string>& args);

}  // namespace tessera::cli
