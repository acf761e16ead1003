#include "tessera/error.hpp"

namespace tessera::detail {

void throw_check_failure(const char* file, int line, const char* expression,
                         const std::string& message) {
  throw InvalidArgument(std::string(file) + ":" + std::to_string(line) + ": " + message + " (" +
                        expression + ")");
}

}  // namespace tessera::detail
