#pragma once
// THE list of transports the conformance suite runs over. A new transport joins by adding a
// line here (and its target to CMakeLists.txt), nothing else.

#include <cstddef>
#include <functional>
#include <map>
#include <string>
#include <vector>

namespace tessera::conformance {

// Options that make a transport cut even a few KiB into many rounds (staging chunks, pipeline
// segments), so that the suite's sizes cross every chunk edge: with the defaults (128 KiB and
// more per round) they all fit in one round, and a bug in the handling of a chunk after the
// first, or of a last chunk shorter than the others, would go unseen. The sizes are not powers
// of two, so no element count of the suite is a whole number of chunks by accident.
struct SmallChunks {
  std::string label;  // joins the test's name: <transport>_<label>_<size>ranks
  std::map<std::string, std::string> options;
  // Bytes of one round's staging buffer per rank at world size n (the unit a staged all_reduce,
  // all_gather or broadcast moves per round, and n blocks of a reduce_scatter round): the chunk
  // edges the chunk-edge tests put element counts around.
  std::function<std::size_t(int n)> round_bytes;
};

struct TransportUnderTest {
  std::string name;              // the plugin name the registry knows it by
  std::vector<int> world_sizes;  // ranks run as threads of this test process
  // Whether the peers of a rank hear at once of its abort (with the reason) and name a rank that
  // never issued a collective. NCCL's kernels only wait for a missing peer, not knowing who or
  // why: nccl fails the group at its timeout instead (nccl_test.cpp checks that).
  bool peers_hear_of_failures = true;
  // Settings under which the suite runs a second time; none for a transport without chunking.
  std::vector<SmallChunks> small_chunks = {};
};

inline const std::vector<TransportUnderTest>& transports_under_test() {
  static const std::vector<TransportUnderTest> transports = {
      {"local", {1, 2, 3, 4, 5, 8}},
      {"ucx",
       {1, 2, 3, 4},
       true,
       {// Staged through mapped peer memory: each rank's staging buffer holds n chunks.
        {"mapped",
         {{"mapped_chunk_size", "4160B"}, {"small_size", "0"}},
         [](int n) { return static_cast<std::size_t>(n) * 4160; }},
        // Messages only: owners reduce and forward one segment at a time.
        {"messages",
         {{"map_peers", "false"}, {"segment_size", "1088B"}, {"small_size", "0"}},
         [](int n) { return static_cast<std::size_t>(n) * 1088; }}}},
      {"shm",
       {1, 2, 3, 4, 8},
       true,
       // The segment rounds n x chunk_size up to whole pages: one 4 KiB page per staging buffer
       // up to 64 ranks. Send/recv channels carry 192-byte slots.
       {{"small_chunks",
         {{"chunk_size", "64B"}, {"small_size", "0"}, {"p2p_chunk_size", "192B"}},
         [](int) { return std::size_t{4096}; }}}},
#ifdef TESSERA_CONFORMANCE_NCCL
      // One GPU per rank, ranks as threads: sizes past the GPUs visible skip, saying so. Not 3
      // or more: NCCL sums in its own order (ring, tree), not the rank order the suite checks
      // bitwise, and with two ranks both orders give the same bits (a + b == b + a).
      {"nccl", {1, 2}, false},
#endif
  };
  return transports;
}

inline bool peers_hear_of_failures(const std::string& name) {
  for (const auto& transport : transports_under_test()) {
    if (transport.name == name) return transport.peers_hear_of_failures;
  }
  return true;
}

}  // namespace tessera::conformance
