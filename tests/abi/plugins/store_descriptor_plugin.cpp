// A store descriptor written out by hand, as an SDK other than this one would lay it out: ABI
// 2.3's (the descriptor ends before url_scheme), or, with TEST_SCHEME_WITHOUT_FACTORY, ABI 2.4's
// with a URL scheme and no factory to read its URLs. Its factory is never reached.
#include <cstddef>
#include <cstdint>

#include "tessera/plugin/build_id.hpp"
#include "tessera/plugin/plugin_abi.h"

namespace {

void* create_nothing(const tessera_factory_args* /*args*/) {
  return nullptr;
}

#ifdef TEST_SCHEME_WITHOUT_FACTORY
constexpr std::uint32_t kSize = sizeof(tessera_plugin_descriptor);
constexpr std::uint16_t kMinor = 4;
constexpr const char* kName = "abi_scheme_without_factory";
#else
// A 2.3 host's descriptor ends here; the fields after it are set to what a host that read past
// struct_size would refuse, so that reading them shows.
constexpr std::uint32_t kSize = offsetof(tessera_plugin_descriptor, url_scheme);
constexpr std::uint16_t kMinor = 3;
constexpr const char* kName = "abi_store_2_3";
#endif

}  // namespace

extern "C" __attribute__((visibility("default")))
const tessera_plugin_descriptor TESSERA_PLUGIN_DESCRIPTOR_NAME = {
    kSize,
    TESSERA_PLUGIN_ABI_MAJOR,
    kMinor,
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
    "abiold",
    nullptr,
};
