#pragma once
// Tells whether the processes behind a group's ranks are still alive.

#include <sys/types.h>

#include <optional>
#include <vector>

namespace tessera::shm {

// Holds a pidfd per peer process: it becomes readable the moment the process exits, even
// while it is an unreaped zombie, and cannot be fooled by pid reuse. Ranks in this process
// (threads of the `local` style) are never reported dead.
class PeerWatch {
 public:
  PeerWatch() = default;
  PeerWatch(const std::vector<pid_t>& pids, int self_rank);
  PeerWatch(PeerWatch&& other) noexcept;
  PeerWatch& operator=(PeerWatch&& other) noexcept;
  PeerWatch(const PeerWatch&) = delete;
  PeerWatch& operator=(const PeerWatch&) = delete;
  ~PeerWatch();

  // The lowest rank whose process has exited, if any. Non-blocking; thread-safe.
  [[nodiscard]] std::optional<int> find_dead() const noexcept;
  // Whether `rank`'s process has exited. Non-blocking; thread-safe.
  [[nodiscard]] bool exited(int rank) const noexcept;
  [[nodiscard]] pid_t pid(int rank) const noexcept { return pids_[static_cast<std::size_t>(rank)]; }

 private:
  void close_all() noexcept;
  std::vector<pid_t> pids_;
  std::vector<int> pidfds_;  // -1: same process, or pidfd unavailable (kill(pid, 0) fallback)
  std::vector<bool> watched_;
};

}  // namespace tessera::shm
