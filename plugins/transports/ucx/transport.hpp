#pragma once
// UcxTransport: ranks in any processes on any hosts, connected with UCX's UCP. Each rank
// publishes its worker address in the store; the world is connected once every rank has read
// every other's and greeted it.

#include "engine.hpp"
#include "tessera/plugin/options.hpp"
#include "tessera/plugin/transport.hpp"

namespace tessera::ucx {

class UcxTransport final : public Transport {
 public:
  explicit UcxTransport(const Options& options);

 protected:
  std::unique_ptr<Communicator> do_connect(std::shared_ptr<Store> store, int rank, int size,
                                           Duration timeout) override;

 private:
  Settings settings_;
};

}  // namespace tessera::ucx
