#include "tessera/version.hpp"

namespace tessera {

const char* version() noexcept {
  return TESSERA_VERSION_STRING;
}

}  // namespace tessera
