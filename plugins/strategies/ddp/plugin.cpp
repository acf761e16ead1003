// The `ddp` strategy.
#include "tessera/sdk/plugin.hpp"

#include "ddp_strategy.hpp"

namespace {

constexpr tessera_option_desc kOptions[] = {
    {"bucket_cap", "size", "25MiB", "gradient bucket size cap (all buckets after the first)",
     nullptr, "1KiB", nullptr},
    {"first_bucket", "size", "1MiB",
     "size of the first bucket, kept small so communication starts early in backward", nullptr,
     "1KiB", nullptr},
    {"compression", "string", "none",
     "gradient compression on the wire (fp32 gradients and accumulation either way)", "none|bf16",
     nullptr, nullptr},
};

}  // namespace

// TESSERA_REPLICATED_STATE: every rank holds parameters and optimizer state whole; train_step
// waits for every all-reduce (the loss's too) before the update, which does not communicate;
// save() writes from every rank, locally, when the writer asks for it.
TESSERA_PLUGIN(strategy, "ddp", "1.0.0",
               "data parallel: replicated state, bucketed all-reduce overlapped with backward",
               TESSERA_NO_ALIASES, kOptions,
               (tessera_plugin_capabilities{TESSERA_REPLICATED_STATE,
                                            TESSERA_DEVICE_CPU | TESSERA_DEVICE_CUDA}),
               tessera::ddp::DdpStrategy)
