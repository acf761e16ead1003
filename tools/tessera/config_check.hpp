#pragma once
// `tessera config check FILE [--section.key=value ...]`: validates a configuration and prints
// every resolved value with where it came from.

#include <string>
#include <vector>

namespace tessera::cli {

int run_config(const std::vector<std::string>& args);

}  // namespace tessera::cli
