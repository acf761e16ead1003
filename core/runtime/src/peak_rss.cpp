#include <fstream>
#include <string>

#include "tessera/runtime/trainer.hpp"

namespace tessera {

std::uint64_t peak_rss_bytes() {
  std::ifstream status("/proc/self/status");
  std::string line;
  while (std::getline(status, line)) {
    if (line.rfind("VmHWM:", 0) == 0) return std::stoull(line.substr(6)) * 1024;  // "... kB"
  }
  return 0;
}

}  // namespace tessera
