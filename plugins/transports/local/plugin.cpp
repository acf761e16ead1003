#include "tessera/sdk/plugin.hpp"

#include "transport.hpp"

namespace {

constexpr tessera_option_desc kOptions[] = {
    {"timeout", "duration", "300s",
     "deadline of every operation; a rank that does not take part by then fails the group", nullptr,
     "1ms", nullptr},
};
constexpr const char* kAliases[] = {"threads", nullptr};

// Ranks are threads of the one process that holds the Transport.
constexpr tessera_plugin_capabilities kCapabilities = {0, TESSERA_DEVICE_CPU};

}  // namespace

TESSERA_PLUGIN(transport, "local", "1.0.0",
               "ranks as threads of one process, the reference transport", kAliases, kOptions,
               kCapabilities, tessera::local::LocalTransport)
