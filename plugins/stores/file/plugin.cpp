// The `file` store: one file per key in a folder on a shared file system.
#include "tessera/sdk/plugin.hpp"

#include "file_store.hpp"

namespace {

constexpr tessera_option_desc kOptions[] = {
    {"path", "string", nullptr, "folder every rank can see (created if missing)", nullptr, nullptr,
     nullptr},
    {"timeout", "duration", "300s", "how long a write waits for the folder's lock", nullptr, "1ms",
     nullptr},
};

// Every process that sees the folder, on any host of a shared file system.
constexpr tessera_plugin_capabilities kCapabilities = {
    TESSERA_SPANS_PROCESSES | TESSERA_SPANS_HOSTS, 0};

}  // namespace

TESSERA_PLUGIN(store, "file", "1.0.0", "one file per key in a folder on a shared file system",
               TESSERA_NO_ALIASES, kOptions, kCapabilities, tessera::file::FileStore)
