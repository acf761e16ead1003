#include <string>

#include "tessera/base/error.hpp"
#include "tessera/transport_kit/transport_support.hpp"

namespace tessera {

QueuedWork::QueuedWork(std::string operation, Duration default_timeout, AbortHandler on_timeout)
    : operation_(std::move(operation)),
      default_timeout_(default_timeout),
      on_timeout_(std::move(on_timeout)) {}

bool QueuedWork::test() {
  std::lock_guard lock(mutex_);
  return done_;
}

void QueuedWork::wait(Duration timeout) {
  std::exception_ptr error;
  {
    std::unique_lock lock(mutex_);
    if (!done_cv_.wait_until(lock, deadline_after(timeout), [&] { return done_; })) {
      lock.unlock();
      const std::string message =
          operation_ + " did not complete within " + std::to_string(timeout.count()) + " ms";
      if (on_timeout_) on_timeout_(message);
      throw Timeout(message);
    }
    error = error_;
  }
  if (error) std::rethrow_exception(error);
}

std::exception_ptr QueuedWork::exception() {
  std::lock_guard lock(mutex_);
  return error_;
}

void QueuedWork::complete(std::exception_ptr error) noexcept {
  {
    std::lock_guard lock(mutex_);
    if (done_) return;
    done_ = true;
    error_ = std::move(error);
  }
  done_cv_.notify_all();
}

}  // namespace tessera
