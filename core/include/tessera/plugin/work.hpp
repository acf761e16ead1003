#pragma once
// Work: the handle of one asynchronous communication operation.

#include <chrono>
#include <exception>

#include "tessera/base/time.hpp"

namespace tessera {

// Thread-safety: test, wait and exception may be called concurrently from any thread.
// Lifetime: the buffers passed to the operation must stay valid until test() returns true or
// wait() returns or throws; destroying a Work does not cancel its operation.
class Work {
 public:
  virtual ~Work() = default;

  // Non-blocking: true once the operation has finished, successfully or not.
  [[nodiscard]] virtual bool test() = 0;

  // Blocks until the operation finishes. Rethrows its error (TransportError, Timeout); throws
  // Timeout if it has not finished after `timeout` (the operation itself goes on, and its
  // communicator is then aborted, since ranks no longer agree on what runs next).
  virtual void wait(Duration timeout) = 0;

  // wait() with the communicator's default timeout.
  void wait() { wait(default_timeout()); }

  // The operation's error once finished, or nullptr on success or while running.
  [[nodiscard]] virtual std::exception_ptr exception() = 0;

 protected:
  [[nodiscard]] virtual Duration default_timeout() const = 0;
};

}  // namespace tessera
