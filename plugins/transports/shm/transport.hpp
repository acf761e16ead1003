#pragma once
// ShmTransport: the `shm` plugin object — ranks are processes (or threads) of one host that
// meet through a store and talk through one POSIX shared-memory segment per group.

#include "settings.hpp"
#include "tessera/plugin/transport.hpp"

namespace tessera::shm {

class ShmTransport final : public Transport {
 public:
  explicit ShmTransport(const Options& options);

 protected:
  std::unique_ptr<Communicator> do_connect(std::shared_ptr<Store> store, int rank, int size,
                                           Duration timeout) override;

 private:
  const Settings settings_;
};

}  // namespace tessera::shm
