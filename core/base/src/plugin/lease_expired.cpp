#include "tessera/plugin/store.hpp"

namespace tessera {

// Out of line, like every error's, so its vtable and type_info live in libtessera only.
LeaseExpired::~LeaseExpired() = default;

}  // namespace tessera
