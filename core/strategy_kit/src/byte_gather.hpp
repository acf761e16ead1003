#pragma once
// Every rank's byte string of differing length, on every rank: lengths first, then one
// all-gather of the strings padded to the longest. Used where ranks exchange saved state.
#include <cstdint>
#include <vector>

#include "tessera/plugin/communicator.hpp"

namespace tessera {

// Collective over `world`; element r of the result is rank r's `mine`. Throws what the
// communicator throws.
[[nodiscard]] std::vector<std::vector<std::uint8_t>> all_gather_bytes(
    Communicator& world, std::vector<std::uint8_t> mine);

}  // namespace tessera
