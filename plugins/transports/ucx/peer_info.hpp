#pragma once
// What a rank publishes about itself at connect: its worker address, and the host and process
// it runs in. The latter lets a rank notice a peer process on its own host that died without
// waiting for UCX to notice (shared-memory transports have no connection to break).

#include <cstdint>
#include <string>
#include <vector>

namespace tessera::ucx {

struct PeerInfo {
  std::string address;  // UCX worker address (binary)
  std::string host;     // boot id + pid namespace: equal only for processes that can see each other
  std::int64_t pid = 0;
};

[[nodiscard]] PeerInfo this_process(std::string address);
[[nodiscard]] std::string encode(const PeerInfo& info);
// Throws TransportError on malformed input (a store shared with something else).
[[nodiscard]] PeerInfo decode(const std::string& text, int rank);

// False only when `peer` is a process on this host that no longer runs (or is a zombie).
// Threads of this process and processes on other hosts always count as alive.
[[nodiscard]] bool process_alive(const PeerInfo& peer, const PeerInfo& self);

}  // namespace tessera::ucx
