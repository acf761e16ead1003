#include "tessera/plugin/work.hpp"

namespace tessera {

void Work::wait_on_stream(const Stream& /*stream*/) {
  // Host work: any stream may start once the bytes are in host memory.
  wait();
}

}  // namespace tessera
