#include "tessera/base/version.hpp"

namespace tessera {

const char* version() noexcept {
  return TESSERA_VERSION_STRING;
}

}  // namespace tessera
