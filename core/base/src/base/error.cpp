#include "tessera/base/error.hpp"

namespace tessera {

Error::~Error() = default;
ConfigError::~ConfigError() = default;
PluginError::~PluginError() = default;
Timeout::~Timeout() = default;
TransportError::~TransportError() = default;
CheckpointError::~CheckpointError() = default;
DataError::~DataError() = default;
InvalidArgument::~InvalidArgument() = default;
OutOfMemory::~OutOfMemory() = default;
TrainingError::~TrainingError() = default;

}  // namespace tessera

namespace tessera::detail {

// The source location stays out of the message: what() reaches users (the CLI prints it), and a
// user can act on what failed, not on where in tessera's sources it was checked. A debugger's
// `catch throw` finds the place.
void throw_check_failure(const char* expression, const std::string& message) {
  throw InvalidArgument(message + " (internal check '" + expression + "' failed)");
}

}  // namespace tessera::detail
