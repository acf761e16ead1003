#pragma once
// Transport: the plugin object that connects ranks into a world Communicator.

#include <memory>

#include "tessera/plugin/communicator.hpp"
#include "tessera/plugin/store.hpp"

namespace tessera {

// What a transport can do (spans processes, spans hosts, the devices of its buffers) is plain
// data in its plugin descriptor (tessera_plugin_capabilities, plugin_abi.h), so that a host
// learns it from the registry without creating a Transport.
//
// Thread-safety: connect may be called from several threads at once (the `local` transport is
// connected by one thread per rank on one Transport object).
class Transport : public PluginObject {
 public:
  // Collective over `size` ranks meeting in `store`: blocks until all have connected, then
  // returns this rank's world communicator. Throws Timeout naming the ranks that never came.
  // The store must outlive the call; the communicator may outlive the transport.
  [[nodiscard]] std::shared_ptr<Communicator> connect(std::shared_ptr<Store> store, int rank,
                                                      int size, Duration timeout);

 protected:
  virtual std::unique_ptr<Communicator> do_connect(std::shared_ptr<Store> store, int rank, int size,
                                                   Duration timeout) = 0;
};

}  // namespace tessera
