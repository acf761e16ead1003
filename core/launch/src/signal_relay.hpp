#pragma once
// SignalRelay: turns SIGINT, SIGTERM and SIGCHLD into bytes on a pipe the launcher polls (the
// self-pipe trick), so signals are handled in the event loop rather than in a handler. Also
// ignores SIGPIPE, so a closed stdout reports EPIPE instead of killing the launcher. Signal
// dispositions are per process: one relay at a time; the previous ones are restored after.

#include <signal.h>

#include <optional>

namespace tessera::launch {

class SignalRelay {
 public:
  SignalRelay();
  ~SignalRelay();
  SignalRelay(const SignalRelay&) = delete;
  SignalRelay& operator=(const SignalRelay&) = delete;

  // The descriptor to poll for POLLIN.
  [[nodiscard]] int fd() const noexcept { return read_fd_; }
  // The next signal received, or nullopt when none is pending. Never blocks.
  [[nodiscard]] std::optional<int> next();

 private:
  int read_fd_ = -1;
  int write_fd_ = -1;
  struct sigaction old_int_ {};
  struct sigaction old_term_ {};
  struct sigaction old_chld_ {};
  struct sigaction old_pipe_ {};
};

}  // namespace tessera::launch
