#include "line_relay.hpp"

#include <fcntl.h>
#include <poll.h>
#include <unistd.h>

#include <cerrno>
#include <utility>

namespace tessera::launch {

namespace {

void write_all(int fd, std::string_view data) {
  while (!data.empty()) {
    const ssize_t n = ::write(fd, data.data(), data.size());
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
      // A non-blocking target that is full (a slow reader of the launcher's output): wait for
      // room rather than drop the rest of the line.
      pollfd p{fd, POLLOUT, 0};
      ::poll(&p, 1, -1);
      continue;
    }
    if (n <= 0) return;  // a closed or broken target: the output is lost, the job goes on
    data.remove_prefix(static_cast<std::size_t>(n));
  }
}

}  // namespace

LineRelay::LineRelay(int rank, int source, int target, bool prefix)
    : prefix_(prefix ? "[rank " + std::to_string(rank) + "] " : std::string()),
      source_(source),
      target_(target) {
  ::fcntl(source_, F_SETFL, ::fcntl(source_, F_GETFL) | O_NONBLOCK);
}

LineRelay::LineRelay(LineRelay&& other) noexcept
    : prefix_(std::move(other.prefix_)),
      source_(std::exchange(other.source_, -1)),
      target_(other.target_),
      pending_(std::move(other.pending_)),
      line_open_(other.line_open_) {}

LineRelay::~LineRelay() {
  close();
}

void LineRelay::emit(std::string_view text, bool end_line) {
  if (target_ >= 0) {
    std::string out;
    out.reserve(prefix_.size() + text.size() + 1);
    if (!line_open_) out.append(prefix_);
    out.append(text);
    if (end_line) out.push_back('\n');
    write_all(target_, out);
  }
  line_open_ = !end_line;
}

void LineRelay::pump() {
  char buffer[16384];
  while (source_ >= 0) {
    const ssize_t n = ::read(source_, buffer, sizeof buffer);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) return;
    if (n <= 0) {
      close();
      return;
    }
    pending_.append(buffer, static_cast<std::size_t>(n));
    std::size_t start = 0;
    for (auto nl = pending_.find('\n'); nl != std::string::npos; nl = pending_.find('\n', start)) {
      emit(std::string_view(pending_).substr(start, nl - start), true);
      start = nl + 1;
    }
    pending_.erase(0, start);
    // A worker that never writes a newline must not grow the buffer without bound: what is
    // held goes out as the start of the line, which stays open.
    if (pending_.size() > kMaxBufferedLine) {
      emit(pending_, false);
      pending_.clear();
    }
  }
}

void LineRelay::close() {
  if (source_ < 0) return;
  if (!pending_.empty() || line_open_) emit(pending_, true);
  pending_.clear();
  ::close(source_);
  source_ = -1;
}

}  // namespace tessera::launch
