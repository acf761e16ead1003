#pragma once
// The error hierarchy. Every error tessera throws derives from tessera::Error, so a host can
// catch one type at its boundary; docs/errors.md says which ones a caller can recover from.

#include <optional>
#include <stdexcept>
#include <string>

namespace tessera {

class Error : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// A configuration value, key, section or plugin name is wrong. The message names where the
// value came from (file:line, environment variable or command-line flag).
class ConfigError : public Error {
 public:
  using Error::Error;
};

// A plugin file could not be loaded or was refused (ABI, build id, kind, descriptor).
class PluginError : public Error {
 public:
  using Error::Error;
};

// A blocking call ran past its deadline. Not a transport fault by itself: a store wait that
// times out leaves the store usable. A timed-out collective, however, leaves its communicator
// aborted, because the ranks no longer agree on which operation comes next.
class Timeout : public Error {
 public:
  using Error::Error;
};

// A collective or point-to-point operation failed: a peer died, the group was aborted, or the
// operation timed out. Carries the failing peer (when one is known) and the operation name.
class TransportError : public Error {
 public:
  TransportError(const std::string& message, std::optional<int> peer_rank, std::string operation)
      : Error(message), peer_rank_(peer_rank), operation_(std::move(operation)) {}

  // The rank that caused the failure, when the transport could tell which one.
  [[nodiscard]] std::optional<int> peer_rank() const noexcept { return peer_rank_; }
  [[nodiscard]] const std::string& operation() const noexcept { return operation_; }

 private:
  std::optional<int> peer_rank_;
  std::string operation_;
};

// A checkpoint is missing, truncated, fails its checksum or does not match the model.
class CheckpointError : public Error {
 public:
  using Error::Error;
};

// A data file is missing, truncated or malformed.
class DataError : public Error {
 public:
  using Error::Error;
};

// A broken internal invariant or a misuse of an API (wrong buffer size, bad rank, ...).
class InvalidArgument : public Error {
 public:
  using Error::Error;
};

namespace detail {
[[noreturn]] void throw_check_failure(const char* file, int line, const char* expression,
                                      const std::string& message);
}  // namespace detail

}  // namespace tessera

// TESSERA_CHECK(cond, message): throws tessera::InvalidArgument("file:line: message (cond)")
// when cond is false. The message is an expression yielding something convertible to
// std::string and is evaluated only on failure.
#define TESSERA_CHECK(cond, message)                                                \
  do {                                                                              \
    if (!(cond)) [[unlikely]]                                                       \
      ::tessera::detail::throw_check_failure(__FILE__, __LINE__, #cond, (message)); \
  } while (false)
