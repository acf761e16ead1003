#pragma once
// The shm transport's options, parsed once (see README.md for their meaning). No member has a
// default of its own: the schema in plugin.cpp is the one place defaults are written, and
// from() fills every member from the resolved options.

#include <cstddef>
#include <cstdint>

#include "tessera/plugin/options.hpp"

namespace tessera::shm {

struct Settings {
  Duration timeout{};
  std::size_t chunk_size = 0;
  std::size_t small_size = 0;
  std::size_t p2p_chunk_size = 0;
  std::int64_t spin_count = 0;
  Duration poll_interval{};
  // A peer waited for whose heartbeat has not moved for this long fails the group; 0: never.
  Duration stall_timeout{};

  [[nodiscard]] static Settings from(const Options& options);
};

}  // namespace tessera::shm
