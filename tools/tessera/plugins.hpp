#pragma once
// `tessera plugins`: lists every plugin the registry finds, with its options.

#include <string>
#include <vector>

namespace tessera::cli {

int run_plugins(const std::vector<std::string>& args);

}  // namespace tessera::cli
