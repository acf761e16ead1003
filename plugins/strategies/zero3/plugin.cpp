// The `zero3` strategy (alias `fsdp`).
#include "tessera/sdk/plugin.hpp"

#include "zero3_strategy.hpp"

namespace {

constexpr const char* kAliases[] = {"fsdp", nullptr};

constexpr tessera_option_desc kOptions[] = {
    {"reshard_after_forward", "bool", "true",
     "free a unit's gathered parameters after its forward and gather them again for backward "
     "(false keeps them until backward, like FSDP's SHARD_GRAD_OP)",
     nullptr, nullptr, nullptr},
    {"prefetch", "int", "1", "units whose gather is issued ahead of the one computing (0: none)",
     nullptr, "0", "1024"},
    {"unit_size", "int", "1", "consecutive layers with parameters gathered together as one unit",
     nullptr, "1", "1000000"},
    {"max_inflight", "int", "2", "parameter gathers issued and not yet waited for, at most",
     nullptr, "1", "1024"},
};

}  // namespace

TESSERA_PLUGIN(strategy, "zero3", "1.0.0",
               "ZeRO-3 / FSDP: parameters, gradients and optimizer state sharded; units gathered "
               "just in time",
               kAliases, kOptions,
               (tessera_plugin_capabilities{0U, TESSERA_DEVICE_CPU | TESSERA_DEVICE_CUDA}),
               tessera::zero3::Zero3Strategy)
