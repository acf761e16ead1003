#pragma once
// The error hierarchy. Every error tessera throws derives from tessera::Error, so a host can
// catch one type at its boundary; docs/errors.md says which ones a caller can recover from.

#include <optional>
#include <stdexcept>
#include <string>

// Error types are thrown inside plugins and caught by hosts, possibly after the plugin's
// registry and objects are gone (its library stays mapped, see docs/plugins.md). Out-of-line
// destructors anchor their vtables and type_info in libtessera (never in a plugin's copy), and
// default visibility keeps plugins built with hidden visibility referring to those rather than
// emitting their own.
#define TESSERA_ERROR_API __attribute__((visibility("default")))

namespace tessera {

class TESSERA_ERROR_API Error : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
  ~Error() override;
};

// A configuration value, key, section or plugin name is wrong. The message names where the
// value came from (file:line, environment variable or command-line flag).
class TESSERA_ERROR_API ConfigError : public Error {
 public:
  using Error::Error;
  ~ConfigError() override;
};

// A plugin file could not be loaded or was refused (ABI, build id, kind, descriptor).
class TESSERA_ERROR_API PluginError : public Error {
 public:
  using Error::Error;
  ~PluginError() override;
};

// A blocking call ran past its deadline. Not a transport fault by itself: a store wait that
// times out leaves the store usable. A timed-out collective, however, leaves its communicator
// aborted, because the ranks no longer agree on which operation comes next.
class TESSERA_ERROR_API Timeout : public Error {
 public:
  using Error::Error;
  ~Timeout() override;
};

// A collective or point-to-point operation failed: a peer died, the group was aborted, or the
// operation timed out. Carries the failing peer (when one is known) and the operation name.
class TESSERA_ERROR_API TransportError : public Error {
 public:
  ~TransportError() override;
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
class TESSERA_ERROR_API CheckpointError : public Error {
 public:
  using Error::Error;
  ~CheckpointError() override;
};

// A data file is missing, truncated or malformed.
class TESSERA_ERROR_API DataError : public Error {
 public:
  using Error::Error;
  ~DataError() override;
};

// A broken internal invariant or a misuse of an API (wrong buffer size, bad rank, ...).
class TESSERA_ERROR_API InvalidArgument : public Error {
 public:
  using Error::Error;
  ~InvalidArgument() override;
};

// A device (the host included) could not supply the memory asked for. The message names the
// device and the size; recoverable only by asking for less (a smaller batch or model).
class TESSERA_ERROR_API OutOfMemory : public Error {
 public:
  using Error::Error;
  ~OutOfMemory() override;
};

// Training went wrong: a step's loss or gradient norm is not finite, its metrics cannot be
// written, or an elastic run lost what it needs to go on (too few workers, a state with no copy
// left). The message names the step, the file or the workers, and what to do.
class TESSERA_ERROR_API TrainingError : public Error {
 public:
  using Error::Error;
  ~TrainingError() override;
};

namespace detail {
[[noreturn]] void throw_check_failure(const char* expression, const std::string& message);
}  // namespace detail

}  // namespace tessera

// TESSERA_CHECK(cond, message): throws tessera::InvalidArgument("message (internal check 'cond'
// failed)") when cond is false; for invariants and API misuse, never for what a user wrote
// (that is a ConfigError naming where the value came from). No source path is in the message. The
// message is an expression yielding something convertible to std::string and is evaluated only on
// failure.
#define TESSERA_CHECK(cond, message)                            \
  do {                                                          \
    if (!(cond)) [[unlikely]]                                   \
      ::tessera::detail::throw_check_failure(#cond, (message)); \
  } while (false)
