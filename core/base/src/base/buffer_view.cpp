#include "tessera/base/buffer_view.hpp"

#include <string>

#include "tessera/base/error.hpp"

namespace tessera {

void check_host_view(const BufferView& view, DType wanted, const char* what) {
  if (view.device != Device::cpu()) {
    throw InvalidArgument(std::string(what) + " lives on " + to_string(view.device) +
                          ", and this code runs on the host only: keep it in host memory or use "
                          "a plugin with a " +
                          to_string(view.device) + " implementation");
  }
  if (view.dtype != wanted) {
    throw InvalidArgument(std::string(what) + " holds " + std::string(dtype_name(view.dtype)) +
                          ", expected " + std::string(dtype_name(wanted)));
  }
}

}  // namespace tessera
