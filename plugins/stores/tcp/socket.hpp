#pragma once
// Blocking-with-deadline socket primitives shared by the tcp store's client and server.

#include <chrono>
#include <cstdint>
#include <string>
#include <string_view>
#include <utility>

#include "tessera/base/error.hpp"

namespace tessera::tcp {

using Clock = std::chrono::steady_clock;

// The connection broke or could not be made (refused, reset, closed). The client treats it as
// transient and reconnects while its deadline allows.
class ConnectionLost : public Error {
 public:
  using Error::Error;
};

// Owns one file descriptor.
class Socket {
 public:
  Socket() = default;
  explicit Socket(int fd) noexcept : fd_(fd) {}
  Socket(Socket&& other) noexcept : fd_(std::exchange(other.fd_, -1)) {}
  Socket& operator=(Socket&& other) noexcept;
  Socket(const Socket&) = delete;
  Socket& operator=(const Socket&) = delete;
  ~Socket() { reset(); }

  [[nodiscard]] int fd() const noexcept { return fd_; }
  [[nodiscard]] bool valid() const noexcept { return fd_ >= 0; }
  void reset() noexcept;

 private:
  int fd_ = -1;
};

// "host:port" or "[v6-host]:port". Throws ConfigError naming `what` when malformed.
[[nodiscard]] std::pair<std::string, std::uint16_t> split_address(std::string_view address,
                                                                  std::string_view what);

// Connects to host:port, giving up at `deadline`. Throws ConnectionLost (refused, unreachable,
// deadline passed) or Error (the host name does not resolve).
[[nodiscard]] Socket connect_tcp(const std::string& host, std::uint16_t port,
                                 Clock::time_point deadline);

// Writes all of `data`. Throws ConnectionLost on a broken connection or when the deadline passes.
void send_all(int fd, std::string_view data, Clock::time_point deadline);

// Reads one frame and returns its payload. Throws ConnectionLost on EOF or error, Timeout when
// the deadline passes first.
[[nodiscard]] std::string recv_frame(int fd, Clock::time_point deadline);

// Milliseconds left until `deadline`, clamped to [0, INT_MAX] for poll().
[[nodiscard]] int poll_timeout_ms(Clock::time_point deadline) noexcept;

}  // namespace tessera::tcp
