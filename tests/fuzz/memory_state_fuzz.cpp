// Fuzz target: the packed state one rank sends another (the elastic runtime's copies, and the
// state a newcomer receives), as unpack_memory_checkpoint and packed_layout_digest read it. A
// CheckpointError is the right answer to bytes that do not add up; any other exception, a crash
// or a sanitizer report is a finding. What unpacks packs again to bytes that unpack to the same
// state (a round trip through pack_memory_checkpoint is stable).

#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <span>
#include <vector>

#include "tessera/base/error.hpp"
#include "tessera/strategy_kit/memory_state.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::span<const std::uint8_t> bytes(data, size);
  try {
    (void)tessera::packed_layout_digest(bytes);
  } catch (const tessera::CheckpointError&) {
  }
  tessera::MemoryCheckpoint into(1);
  try {
    tessera::unpack_memory_checkpoint(bytes, into);
  } catch (const tessera::CheckpointError&) {
    return 0;
  }
  const auto again = tessera::pack_memory_checkpoint(into);
  tessera::MemoryCheckpoint back(1);
  tessera::unpack_memory_checkpoint(again, back);  // must not throw: it came from a pack
  if (back.blobs() != into.blobs() || back.slices() != into.slices()) std::abort();
  if (tessera::pack_memory_checkpoint(back) != again) std::abort();
  return 0;
}
