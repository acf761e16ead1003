#pragma once
// `tessera selfcheck`: an all-reduce self-check of one transport over N ranks in this process.

#include <string>
#include <vector>

namespace tessera::cli {

// `args` are the words after "selfcheck". Returns the process exit code: 0 when every check
// passed, 1 when one failed, 2 on bad usage.
int run_selfcheck(const std::vector<std::string>& args);

}  // namespace tessera::cli
