// The `etcd` store: a client of an etcd v3 server, through etcd's JSON gateway.
#include "tessera/sdk/plugin.hpp"

#include "etcd_store.hpp"

namespace {

constexpr tessera_option_desc kOptions[] = {
    {"endpoints", "string", "127.0.0.1:2379",
     "host:port of etcd's client URLs, comma-separated, tried in turn", nullptr, nullptr, nullptr},
    {"prefix", "string", nullptr,
     "prepended to every key of this job (e.g. tessera/<job>/); jobs sharing an etcd need "
     "different ones",
     nullptr, nullptr, nullptr},
    {"timeout", "duration", "30s",
     "how long one request keeps retrying an etcd that does not answer before it fails", nullptr,
     "1ms", nullptr},
};

// Every process that reaches the etcd server, on any host.
constexpr tessera_plugin_capabilities kCapabilities = {
    TESSERA_SPANS_PROCESSES | TESSERA_SPANS_HOSTS, 0};

}  // namespace

TESSERA_PLUGIN(store, "etcd", "1.0.0", "client of an etcd v3 server, through its JSON gateway",
               TESSERA_NO_ALIASES, kOptions, kCapabilities, tessera::etcd::EtcdStore)
