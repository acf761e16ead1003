#pragma once
// Transport: the plugin object that connects ranks into a world Communicator.

#include <memory>
#include <vector>

#include "tessera/plugin/communicator.hpp"
#include "tessera/plugin/store.hpp"

namespace tessera {

struct TransportCapabilities {
  std::vector<DeviceType> devices;  // where buffers may live
  std::vector<DType> dtypes;        // element types every operation accepts
  bool multi_process = false;       // ranks may be separate processes
  bool multi_host = false;          // ranks may be on different hosts
};

// Thread-safety: connect may be called from several threads at once (the `local` transport is
// connected by one thread per rank on one Transport object).
class Transport : public PluginObject {
 public:
  [[nodiscard]] virtual TransportCapabilities capabilities() const = 0;

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
