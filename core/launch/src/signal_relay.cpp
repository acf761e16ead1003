#include "signal_relay.hpp"

#include <fcntl.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstring>

#include "tessera/base/error.hpp"

namespace tessera::launch {

namespace {

// The handler can reach only globals; -1 while no relay is installed.
std::atomic<int> relay_write_fd{-1};

extern "C" void relay_signal(int signal_number) {
  const int saved_errno = errno;
  const auto byte = static_cast<unsigned char>(signal_number);
  [[maybe_unused]] auto n = ::write(relay_write_fd.load(), &byte, 1);
  errno = saved_errno;
}

}  // namespace

SignalRelay::SignalRelay() {
  int fds[2];
  if (::pipe2(fds, O_CLOEXEC | O_NONBLOCK) != 0)
    throw Error(std::string("launcher: pipe failed: ") + std::strerror(errno));
  int expected = -1;
  if (!relay_write_fd.compare_exchange_strong(expected, fds[1])) {
    ::close(fds[0]);
    ::close(fds[1]);
    throw InvalidArgument("launcher: another launch is already running in this process");
  }
  read_fd_ = fds[0];
  write_fd_ = fds[1];
  struct sigaction action {};
  action.sa_handler = relay_signal;
  sigemptyset(&action.sa_mask);
  action.sa_flags = SA_RESTART;
  ::sigaction(SIGINT, &action, &old_int_);
  ::sigaction(SIGTERM, &action, &old_term_);
  action.sa_flags = SA_RESTART | SA_NOCLDSTOP;
  ::sigaction(SIGCHLD, &action, &old_chld_);
  struct sigaction ignore {};
  ignore.sa_handler = SIG_IGN;
  sigemptyset(&ignore.sa_mask);
  ::sigaction(SIGPIPE, &ignore, &old_pipe_);
}

SignalRelay::~SignalRelay() {
  ::sigaction(SIGINT, &old_int_, nullptr);
  ::sigaction(SIGTERM, &old_term_, nullptr);
  ::sigaction(SIGCHLD, &old_chld_, nullptr);
  ::sigaction(SIGPIPE, &old_pipe_, nullptr);
  relay_write_fd.store(-1);
  ::close(read_fd_);
  ::close(write_fd_);
}

std::optional<int> SignalRelay::next() {
  unsigned char byte = 0;
  for (;;) {
    const ssize_t n = ::read(read_fd_, &byte, 1);
    if (n == 1) return static_cast<int>(byte);
    if (n < 0 && errno == EINTR) continue;
    return std::nullopt;
  }
}

}  // namespace tessera::launch
