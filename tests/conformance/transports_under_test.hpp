#pragma once
// THE list of transports the conformance suite runs over. A new transport joins by adding a
// line here (and its target to CMakeLists.txt), nothing else.

#include <string>
#include <vector>

namespace tessera::conformance {

struct TransportUnderTest {
  std::string name;              // the plugin name the registry knows it by
  std::vector<int> world_sizes;  // ranks run as threads of this test process
  // Whether the peers of a rank hear at once of its abort (with the reason) and name a rank that
  // never issued a collective. NCCL's kernels only wait for a missing peer, not knowing who or
  // why: nccl fails the group at its timeout instead (nccl_test.cpp checks that).
  bool peers_hear_of_failures = true;
};

inline const std::vector<TransportUnderTest>& transports_under_test() {
  static const std::vector<TransportUnderTest> transports = {
      {"local", {1, 2, 3, 4, 5, 8}},
      {"ucx", {1, 2, 3, 4}},
      {"shm", {1, 2, 3, 4, 8}},
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
