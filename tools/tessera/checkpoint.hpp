#pragma once
// `tessera checkpoint consolidate SRC DST`: one full, unsharded checkpoint for export.

#include <string>
#include <vector>

namespace tessera::cli {

// `args` are the words after "checkpoint". SRC is a checkpoint folder or a checkpoint root
// (its newest checkpoint is taken, as --resume does); the flat parameters and optimizer state are
// read from whatever shards and world size wrote them and written to the root DST as one shard at
// world size 1, the form ddp writes, with the source's step and metadata. Returns 0. Throws
// UsageError on bad arguments and CheckpointError for an unreadable source, a DST that already
// holds a checkpoint of that step, or a failed write.
int run_checkpoint(const std::vector<std::string>& args);

}  // namespace tessera::cli
