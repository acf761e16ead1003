#include "peer_watch.hpp"

#include <poll.h>
#include <signal.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cerrno>
#include <utility>

namespace tessera::shm {

PeerWatch::PeerWatch(const std::vector<pid_t>& pids, int self_rank) : pids_(pids) {
  const pid_t self = ::getpid();
  for (std::size_t r = 0; r < pids.size(); ++r) {
    const bool other_process = static_cast<int>(r) != self_rank && pids[r] != self;
    int fd = -1;
    if (other_process) fd = static_cast<int>(::syscall(SYS_pidfd_open, pids[r], 0));
    pidfds_.push_back(fd);
    watched_.push_back(other_process);
  }
}

PeerWatch::PeerWatch(PeerWatch&& other) noexcept {
  *this = std::move(other);
}

PeerWatch& PeerWatch::operator=(PeerWatch&& other) noexcept {
  if (this == &other) return *this;
  close_all();
  pids_ = std::move(other.pids_);
  pidfds_ = std::move(other.pidfds_);
  watched_ = std::move(other.watched_);
  other.pidfds_.clear();
  return *this;
}

PeerWatch::~PeerWatch() {
  close_all();
}

void PeerWatch::close_all() noexcept {
  for (int fd : pidfds_)
    if (fd >= 0) ::close(fd);
  pidfds_.clear();
}

std::optional<int> PeerWatch::find_dead() const noexcept {
  for (std::size_t r = 0; r < pidfds_.size(); ++r) {
    if (exited(static_cast<int>(r))) return static_cast<int>(r);
  }
  return std::nullopt;
}

bool PeerWatch::exited(int rank) const noexcept {
  const auto r = static_cast<std::size_t>(rank);
  if (r >= pidfds_.size() || !watched_[r]) return false;
  if (pidfds_[r] >= 0) {
    pollfd entry{pidfds_[r], POLLIN, 0};
    return ::poll(&entry, 1, 0) > 0 && (entry.revents & (POLLIN | POLLHUP | POLLERR)) != 0;
  }
  return ::kill(pids_[r], 0) == -1 && errno == ESRCH;
}

}  // namespace tessera::shm
