// A transport whose ranks are processes and whose constructor always throws: a host that
// creates it to learn how to lay out a world fails, one that reads its descriptor does not.
#include "tessera/base/error.hpp"
#include "tessera/sdk/plugin.hpp"

namespace {

class NeverCreatedTransport final : public tessera::Transport {
 public:
  explicit NeverCreatedTransport(const tessera::Options& /*options*/) {
    throw tessera::InvalidArgument("world_test_processes was created");
  }

 protected:
  std::unique_ptr<tessera::Communicator> do_connect(std::shared_ptr<tessera::Store> /*store*/,
                                                    int /*rank*/, int /*size*/,
                                                    tessera::Duration /*timeout*/) override {
    return nullptr;
  }
};

constexpr tessera_plugin_capabilities kCapabilities = {TESSERA_SPANS_PROCESSES, TESSERA_DEVICE_CPU};

}  // namespace

TESSERA_PLUGIN(transport, "world_test_processes", "0.1.0",
               "world-plan test: ranks are processes, never created", TESSERA_NO_ALIASES,
               TESSERA_NO_OPTIONS, kCapabilities, NeverCreatedTransport)
