// The `tcp` store: an embedded key-value server and its clients.
#include "tessera/sdk/plugin.hpp"

#include "tcp_store.hpp"

namespace {

constexpr tessera_option_desc kOptions[] = {
    {"host", "string", "",
     "serve: address to bind (empty: 127.0.0.1); client: server to reach (empty: "
     "TESSERA_STORE_ADDR)",
     nullptr, nullptr, nullptr},
    {"port", "int", "0", "serve: port to bind (0: a free one); client: server's port", nullptr, "0",
     "65535"},
    {"token", "string", "", "job token every client presents (empty: TESSERA_STORE_TOKEN)", nullptr,
     nullptr, nullptr},
    {"timeout", "duration", "300s", "how long a request keeps reconnecting before it fails",
     nullptr, "1ms", nullptr},
    {"serve", "bool", "false", "run the server in this process (the launcher, or rank 0)", nullptr,
     nullptr, nullptr},
    {"max_pending", "int", "64",
     "serve: connections without the token held at once; a new one closes the oldest", nullptr, "1",
     "65536"},
    {"hello_timeout", "duration", "10s",
     "serve: a connection that has not presented the token by then is closed", nullptr, "1ms",
     nullptr},
};

constexpr tessera_plugin_capabilities kCapabilities = {
    TESSERA_SPANS_PROCESSES | TESSERA_SPANS_HOSTS, 0};

}  // namespace

TESSERA_PLUGIN(store, "tcp", "1.0.0",
               "key-value server over TCP, embedded in the launcher or rank 0", TESSERA_NO_ALIASES,
               kOptions, kCapabilities, tessera::tcp::TcpStore)
