#pragma once
// A mistake in how the CLI was called; main() prints it and exits 2, like a config error.

#include <stdexcept>

namespace tessera::cli {

class UsageError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

}  // namespace tessera::cli
