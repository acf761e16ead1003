#pragma once
// `tessera launch`: starts N worker processes of one job on this host.

#include <string>
#include <vector>

namespace tessera::cli {

// `args` are the words after "launch". Returns the process exit code.
int run_launch(const std::vector<std::string>& args);

}  // namespace tessera::cli
