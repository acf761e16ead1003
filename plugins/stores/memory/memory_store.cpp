#include "memory_store.hpp"

namespace tessera::memory {

MemoryStore::MemoryStore(const Options& /*options: none*/) : inner_(make_memory_store()) {}

}  // namespace tessera::memory
