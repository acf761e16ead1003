#include "tessera/base/time.hpp"

namespace tessera {

Deadline deadline_after(Duration timeout) noexcept {
  const auto now = std::chrono::steady_clock::now();
  const auto room = std::chrono::duration_cast<Duration>(Deadline::max() - now);
  return timeout >= room ? Deadline::max() : now + timeout;
}

}  // namespace tessera
