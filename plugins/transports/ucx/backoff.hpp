#pragma once
// How a rank waits for UCX: spin while messages flow, then yield, then sleep briefly, so that
// a rank waiting on a slow peer does not steal the CPU that peer needs (ranks as threads, or
// more ranks than cores).

#include <chrono>
#include <thread>

namespace tessera::ucx {

class Backoff {
 public:
  void reset() noexcept { idle_ = 0; }
  void idle() {
    ++idle_;
    if (idle_ < kSpins) return;
    if (idle_ < kYields) {
      std::this_thread::yield();
      return;
    }
    std::this_thread::sleep_for(std::chrono::microseconds(50));
  }
  [[nodiscard]] bool sleeping() const noexcept { return idle_ >= kYields; }

 private:
  static constexpr int kSpins = 100;
  static constexpr int kYields = 2000;
  int idle_ = 0;
};

}  // namespace tessera::ucx
