#pragma once
// `tessera selfcheck`: an all-reduce self-check of one transport over N ranks in this process.

#include <string>
#include <vector>

namespace tessera::cli {

// `args` are the words after "selfcheck". Returns 0 when every check passed, 1 when one
// failed. Throws UsageError on bad arguments and tessera::Error when the transport cannot be
// loaded or connected; main() turns those into a message and exit status 2 or 1.
int run_selfcheck(const std::vector<std::string>& args);

}  // namespace tessera::cli
