#pragma once
// `tessera bench collectives`: the nccl-tests table for one transport.

#include <string>
#include <vector>

namespace tessera::cli {

// `args` are the words after "bench". Returns the process exit code.
int run_bench(const std::vector<std::string>& args);

}  // namespace tessera::cli
