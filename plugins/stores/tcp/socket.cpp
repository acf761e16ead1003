#include "socket.hpp"

#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <charconv>
#include <climits>
#include <cstring>
#include <memory>

#include "protocol.hpp"

namespace tessera::tcp {

namespace {

std::string errno_text(int err) {
  return std::strerror(err);
}

// Waits until fd is ready for `events`; false when the deadline passed first.
bool wait_ready(int fd, short events, Clock::time_point deadline) {
  for (;;) {
    pollfd p{fd, events, 0};
    const int n = ::poll(&p, 1, poll_timeout_ms(deadline));
    if (n > 0) return true;
    if (n == 0) return false;
    if (errno != EINTR) throw ConnectionLost("tcp store: poll failed: " + errno_text(errno));
  }
}

void read_exact(int fd, char* out, std::size_t n, Clock::time_point deadline) {
  while (n > 0) {
    if (!wait_ready(fd, POLLIN, deadline)) throw Timeout("tcp store: no reply before the deadline");
    const ssize_t got = ::recv(fd, out, n, 0);
    if (got == 0) throw ConnectionLost("tcp store: the server closed the connection");
    if (got < 0) {
      if (errno == EINTR || errno == EAGAIN) continue;
      throw ConnectionLost("tcp store: receive failed: " + errno_text(errno));
    }
    out += got;
    n -= static_cast<std::size_t>(got);
  }
}

}  // namespace

Socket& Socket::operator=(Socket&& other) noexcept {
  if (this != &other) {
    reset();
    fd_ = std::exchange(other.fd_, -1);
  }
  return *this;
}

void Socket::reset() noexcept {
  if (fd_ >= 0) ::close(fd_);
  fd_ = -1;
}

int poll_timeout_ms(Clock::time_point deadline) noexcept {
  const auto left = std::chrono::ceil<std::chrono::milliseconds>(deadline - Clock::now()).count();
  if (left <= 0) return 0;
  return left > INT_MAX ? INT_MAX : static_cast<int>(left);
}

std::pair<std::string, std::uint16_t> split_address(std::string_view address,
                                                    std::string_view what) {
  const auto bad = [&] {
    return ConfigError(std::string(what) + ": '" + std::string(address) +
                       "' is not an address of the form host:port");
  };
  const auto colon = address.rfind(':');
  if (colon == std::string_view::npos || colon == 0) throw bad();
  auto host = address.substr(0, colon);
  if (host.front() == '[' && host.back() == ']') host = host.substr(1, host.size() - 2);
  const auto port_text = address.substr(colon + 1);
  unsigned port = 0;
  const auto [end, ec] =
      std::from_chars(port_text.data(), port_text.data() + port_text.size(), port);
  if (ec != std::errc() || end != port_text.data() + port_text.size() || port == 0 || port > 65535)
    throw bad();
  return {std::string(host), static_cast<std::uint16_t>(port)};
}

Socket connect_tcp(const std::string& host, std::uint16_t port, Clock::time_point deadline) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* found = nullptr;
  const auto port_text = std::to_string(port);
  if (const int rc = ::getaddrinfo(host.c_str(), port_text.c_str(), &hints, &found); rc != 0)
    throw Error("tcp store: cannot resolve '" + host + "': " + ::gai_strerror(rc));
  std::unique_ptr<addrinfo, decltype(&::freeaddrinfo)> list(found, &::freeaddrinfo);

  std::string last_error = "no address";
  for (const addrinfo* ai = list.get(); ai != nullptr; ai = ai->ai_next) {
    Socket s(
        ::socket(ai->ai_family, ai->ai_socktype | SOCK_CLOEXEC | SOCK_NONBLOCK, ai->ai_protocol));
    if (!s.valid()) {
      last_error = errno_text(errno);
      continue;
    }
    int rc = ::connect(s.fd(), ai->ai_addr, ai->ai_addrlen);
    if (rc != 0 && errno == EINPROGRESS) {
      if (!wait_ready(s.fd(), POLLOUT, deadline)) {
        last_error = "connect timed out";
        continue;
      }
      int err = 0;
      socklen_t len = sizeof err;
      ::getsockopt(s.fd(), SOL_SOCKET, SO_ERROR, &err, &len);
      rc = err == 0 ? 0 : -1;
      errno = err;
    }
    if (rc != 0) {
      last_error = errno_text(errno);
      continue;
    }
    const int one = 1;
    ::setsockopt(s.fd(), IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    return s;
  }
  throw ConnectionLost("tcp store: cannot connect to " + host + ":" + port_text + ": " +
                       last_error);
}

void send_all(int fd, std::string_view data, Clock::time_point deadline) {
  while (!data.empty()) {
    const ssize_t sent = ::send(fd, data.data(), data.size(), MSG_NOSIGNAL);
    if (sent < 0) {
      if (errno == EINTR) continue;
      if (errno == EAGAIN || errno == EWOULDBLOCK) {
        if (!wait_ready(fd, POLLOUT, deadline)) throw ConnectionLost("tcp store: send timed out");
        continue;
      }
      throw ConnectionLost("tcp store: send failed: " + errno_text(errno));
    }
    data.remove_prefix(static_cast<std::size_t>(sent));
  }
}

std::string recv_frame(int fd, Clock::time_point deadline) {
  char header[kFrameHeaderBytes];
  read_exact(fd, header, sizeof header, deadline);
  const auto length = frame_length(header);
  if (length > kMaxFrameBytes) throw ConnectionLost("tcp store: oversized reply");
  std::string payload(length, '\0');
  read_exact(fd, payload.data(), length, deadline);
  return payload;
}

}  // namespace tessera::tcp
