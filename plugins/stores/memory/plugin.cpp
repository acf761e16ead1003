#include "tessera/sdk/plugin.hpp"

#include "memory_store.hpp"

TESSERA_PLUGIN(store, "memory", "1.0.0",
               "in-process store for ranks that are threads of one process (the local transport)",
               TESSERA_NO_ALIASES, TESSERA_NO_OPTIONS, TESSERA_NO_CAPABILITIES,
               tessera::memory::MemoryStore)
