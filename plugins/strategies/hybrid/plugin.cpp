// The `hybrid` strategy: tensor x pipeline x data parallelism.
#include "tessera/sdk/plugin.hpp"

#include "hybrid_strategy.hpp"

namespace {

constexpr tessera_option_desc kOptions[] = {
    {"tensor_parallel", "int", "1",
     "ranks of a tensor group: Linear pairs split column- then row-parallel over them, gpt "
     "blocks by heads, the gpt embedding and head by vocabulary",
     nullptr, "1", "4096"},
    {"pipeline_parallel", "int", "1", "pipeline stages the model's layers are cut into", nullptr,
     "1", "4096"},
    {"micro_batches", "int", "0",
     "micro-batches per step through the pipeline (0: [train] micro_batches)", nullptr, "0",
     "1000000"},
    {"schedule", "string", "1f1b", "pipeline schedule", "gpipe|1f1b", nullptr, nullptr},
    {"partition", "string", "uniform",
     "how layers are cut into stages: uniform (layer counts) or balanced (estimated cost)",
     "uniform|balanced", nullptr, nullptr},
    {"data_parallel_sharding", "string", "none",
     "none: optimizer state replicated over the data group; zero1: sharded over it", "none|zero1",
     nullptr, nullptr},
    {"recompute", "string", "none",
     "full: keep only each stage's input of a micro-batch and run its forward again in backward "
     "(not where its backward runs next)",
     "none|full", nullptr, nullptr},
    {"bucket_cap", "size", "25MiB",
     "data-parallel gradient bucket size cap (all buckets after the first)", nullptr, "1KiB",
     nullptr},
    {"first_bucket", "size", "1MiB",
     "size of the first data-parallel gradient bucket, kept small so communication starts early",
     nullptr, "1KiB", nullptr},
};

}  // namespace

TESSERA_PLUGIN(strategy, "hybrid", "1.0.0",
               "3-D parallelism: tensor (column/row Linear pairs) x pipeline (GPipe, 1F1B) x data",
               TESSERA_NO_ALIASES, kOptions, (tessera_plugin_capabilities{0U, TESSERA_DEVICE_CPU}),
               tessera::hybrid::HybridStrategy)
