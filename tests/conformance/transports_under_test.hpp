#pragma once
// THE list of transports the conformance suite runs over. A new transport joins by adding a
// line here (and its target to CMakeLists.txt), nothing else.

#include <string>
#include <vector>

namespace tessera::conformance {

struct TransportUnderTest {
  std::string name;              // the plugin name the registry knows it by
  std::vector<int> world_sizes;  // ranks run as threads of this test process
};

inline const std::vector<TransportUnderTest>& transports_under_test() {
  static const std::vector<TransportUnderTest> transports = {
      {"local", {1, 2, 3, 4, 5, 8}},
      {"ucx", {1, 2, 3, 4}},
      {"shm", {1, 2, 3, 4, 8}},
  };
  return transports;
}

}  // namespace tessera::conformance
