#include "tessera/plugin/transport.hpp"

#include "tessera/base/error.hpp"

namespace tessera {

std::shared_ptr<Communicator> Transport::connect(std::shared_ptr<Store> store, int rank, int size,
                                                 Duration timeout) {
  TESSERA_CHECK(store != nullptr, "Transport::connect needs a store");
  TESSERA_CHECK(size >= 1, "world size must be at least 1, got " + std::to_string(size));
  TESSERA_CHECK(rank >= 0 && rank < size,
                "rank " + std::to_string(rank) + " is outside [0, " + std::to_string(size) + ")");
  return do_connect(std::move(store), rank, size, timeout);
}

}  // namespace tessera
