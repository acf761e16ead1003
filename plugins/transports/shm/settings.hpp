#pragma once
// The shm transport's options, parsed once (see README.md for their meaning).

#include <cstddef>
#include <cstdint>

#include "tessera/plugin/options.hpp"

namespace tessera::shm {

struct Settings {
  Duration timeout = std::chrono::seconds(300);
  std::size_t chunk_size = std::size_t{128} << 10;
  std::size_t small_size = std::size_t{32} << 10;
  std::size_t p2p_chunk_size = std::size_t{256} << 10;
  std::int64_t spin_count = 20000;
  Duration poll_interval = std::chrono::milliseconds(100);
  // A peer waited for whose heartbeat has not moved for this long fails the group; 0: never.
  Duration stall_timeout = std::chrono::seconds(30);

  [[nodiscard]] static Settings from(const Options& options);
};

}  // namespace tessera::shm
