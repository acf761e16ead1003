#pragma once
// Lets a test act while another thread is blocked inside a call (a get waiting for its key, a
// watch waiting for a change), instead of sleeping and hoping that the thread got there: the
// calling thread says when it enters and leaves the call, and the test polls the kernel's view of
// that thread (/proc/self/task/<tid>/stat) until it sleeps inside the call. A test that acts
// after wait_until_blocked() returned true tests the waiting path, whatever the machine's load.

#include <sys/syscall.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <fstream>
#include <string>
#include <thread>

namespace tessera::testing {

class BlockedCall {
 public:
  // On the calling thread, just before the call.
  void entering() noexcept { tid_.store(static_cast<pid_t>(::syscall(SYS_gettid))); }
  // On the calling thread, once the call returned.
  void returned() noexcept { returned_.store(true); }

  // True once the thread entered the call and the kernel has it asleep (state S or D) in two
  // reads 1 ms apart without the call having returned; false when the call returned first or
  // `timeout` passed. A thread of ours sleeps there only in a wait: on a condition, a socket, a
  // poll interval of the call.
  [[nodiscard]] bool wait_until_blocked(
      std::chrono::milliseconds timeout = std::chrono::seconds(10)) const {
    const auto until = std::chrono::steady_clock::now() + timeout;
    int asleep = 0;
    while (std::chrono::steady_clock::now() < until) {
      if (returned_.load()) return false;
      const pid_t tid = tid_.load();
      asleep = tid != 0 && sleeping(tid) ? asleep + 1 : 0;
      if (asleep == 2) return !returned_.load();
      std::this_thread::sleep_for(std::chrono::milliseconds(1));  // the poll's period
    }
    return false;
  }

 private:
  static bool sleeping(pid_t tid) {
    std::ifstream in("/proc/self/task/" + std::to_string(tid) + "/stat");
    const std::string stat((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    const auto name_end = stat.rfind(')');  // the state letter follows the name in parentheses
    if (name_end == std::string::npos || name_end + 2 >= stat.size()) return false;
    const char state = stat[name_end + 2];
    return state == 'S' || state == 'D';
  }

  std::atomic<pid_t> tid_{0};
  std::atomic<bool> returned_{false};
};

}  // namespace tessera::testing
