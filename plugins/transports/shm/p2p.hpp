#pragma once
// Sends and receives over the per-pair channels of the segment: each direction has two slots
// used round robin; a message is cut into chunks that carry its tag, size and offset. Messages
// on one channel arrive in send order; a receive takes the first message from its peer whose
// tag matches, so receives for different tags may be issued in any order within a batch.

#include <vector>

#include "group.hpp"
#include "op_queue.hpp"

namespace tessera::shm {

// Moves every chunk that can move now without waiting. Returns whether anything moved.
// Throws TransportError (failing the group) when a message's size differs from its receive.
bool advance_transfers(Group& group, std::vector<Transfer>& active);

// -1 if advance_transfers would move something now, else the peer the batch waits for.
[[nodiscard]] int transfers_blocked_on(const Group& group,
                                       const std::vector<Transfer>& active) noexcept;

}  // namespace tessera::shm
