#pragma once
// Work: the handle of one asynchronous communication operation, on the host or on a device.

#include <chrono>
#include <exception>

#include "tessera/base/stream.hpp"
#include "tessera/base/time.hpp"

namespace tessera {

// Two ways to wait, as c10d has them: wait() blocks the host until the result is in place (for
// device work: until the device has finished it), so the host may read it; wait_on_stream()
// only orders the operation before later work on a device stream and returns at once, so
// device work overlaps with the host. Every CPU transport's work is host work.
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

  // True when the operation completes on a device stream (its buffers are device memory).
  [[nodiscard]] virtual bool on_device() const noexcept { return false; }

  // Makes every piece of work submitted to `stream` after this call run after the operation,
  // without blocking the host (errors then surface at the next wait() or exception()). Host
  // work has no stream to join: the base implementation is wait(), after which the result is
  // there for any stream. Device work throws InvalidArgument for a stream on another device.
  virtual void wait_on_stream(const Stream& stream);

  // The operation's error once finished, or nullptr on success or while running.
  [[nodiscard]] virtual std::exception_ptr exception() = 0;

 protected:
  [[nodiscard]] virtual Duration default_timeout() const = 0;
};

}  // namespace tessera
