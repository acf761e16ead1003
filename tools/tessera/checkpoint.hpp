#pragma once
// `tessera checkpoint consolidate SRC DST`: one full, unsharded checkpoint for export;
// `tessera checkpoint inspect CHECKPOINT`: what a checkpoint holds and who wrote which slice.

#include <filesystem>
#include <string>
#include <vector>

namespace tessera::cli {

// A checkpoint folder, or a root whose newest checkpoint is taken (as --resume takes it).
// Throws CheckpointError naming `source` when it is not a folder.
[[nodiscard]] std::filesystem::path checkpoint_folder(const std::filesystem::path& source);

// `args` are the words after "checkpoint". SRC is a checkpoint folder or a checkpoint root
// (its newest checkpoint is taken, as --resume does); every parameter and optimizer slot is read
// from whatever slices (or format-1 shards) and world size wrote them and written to the root DST
// whole, at world size 1, the form ddp writes, with the source's step and metadata. inspect
// prints the manifest and each parameter's blobs after checking they cover it exactly. Returns 0.
// Throws UsageError on bad arguments and CheckpointError for an unreadable source, a DST that
// already holds a checkpoint of that step, or a failed write.
int run_checkpoint(const std::vector<std::string>& args);

}  // namespace tessera::cli
