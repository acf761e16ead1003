#include "tessera/error.hpp"

namespace tessera {

Error::~Error() = default;
ConfigError::~ConfigError() = default;
PluginError::~PluginError() = default;
Timeout::~Timeout() = default;
TransportError::~TransportError() = default;
CheckpointError::~CheckpointError() = default;
DataError::~DataError() = default;
InvalidArgument::~InvalidArgument() = default;

}  // namespace tessera

namespace tessera::detail {

void throw_check_failure(const char* file, int line, const char* expression,
                         const std::string& message) {
  throw InvalidArgument(std::string(file) + ":" + std::to_string(line) + ": " + message + " (" +
                        expression + ")");
}

}  // namespace tessera::detail
