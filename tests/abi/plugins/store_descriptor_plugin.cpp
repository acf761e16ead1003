// A store descriptor written out by hand, as an SDK other than this one would lay it out: one
// that declares no URL scheme (no URL can name it), or, with TEST_SCHEME_WITHOUT_FACTORY, a URL
// scheme and no factory to read its URLs. Its factory is never reached.
#include <cstddef>
#include <cstdint>

#include "tessera/plugin/build_id.hpp"
#include "tessera/plugin/plugin_abi.h"

namespace {

void* create_nothing(const tessera_factory_args* /*args*/) {
  return nullptr;
}

#ifdef TEST_SCHEME_WITHOUT_FACTORY
constexpr const char* kName = "abi_scheme_without_factory";
constexpr const char* kScheme = "abiold";
#else
constexpr const char* kName = "abi_store_without_scheme";
constexpr const char* kScheme = nullptr;
#endif

}  // namespace

extern "C" __attribute__((visibility("default")))
const tessera_plugin_descriptor TESSERA_PLUGIN_DESCRIPTOR_NAME = {
    sizeof(tessera_plugin_descriptor),
    TESSERA_PLUGIN_ABI_MAJOR,
    TESSERA_PLUGIN_ABI_MINOR,
    TESSERA_BUILD_ID,
    "store",
    kName,
    nullptr,
    "1.0.0",
    "a store descriptor laid out by hand",
    nullptr,
    0,
    sizeof(tessera_option_desc),
    {TESSERA_SPANS_PROCESSES, 0},
    &create_nothing,
    kScheme,
    nullptr,
};
