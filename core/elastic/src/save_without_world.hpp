#pragma once
// The survivors' state written as a checkpoint when no world of theirs can be formed (the shm
// transport refused one for lack of room in /dev/shm), so that a job that stops for it never
// loses the steps since its last checkpoint: the copies are in the survivors' memory, and the
// job's store still answers.
//
// Each survivor says through the store what it holds of the world its copies are of (the rows
// plan_recovery reads, its position at each step, the newest checkpoint it sees on disk);
// every survivor then computes the same plan (plan_recovery is pure). Each giver writes the
// ranks of that world it gives, as those ranks would have written them (CheckpointParts), into
// one temporary folder of checkpoint_dir; once all say they wrote theirs, the lowest survivor
// commits the manifest, and every survivor learns the outcome. The checkpoint is of the old
// world's size, like one that world would have written at that step: `--resume` loads it at any
// world size.
#include <cstdint>
#include <filesystem>
#include <optional>
#include <string>

#include "copy_ring.hpp"
#include "tessera/elastic/elastic_world.hpp"
#include "tessera/runtime/world_source.hpp"

namespace tessera::elastic {

struct SavedWithoutWorld {
  // The checkpoint that holds the survivors' state: written now, or one as new that was there.
  std::optional<std::filesystem::path> folder;
  std::int64_t step = -1;  // the step of the survivors' state (-1: none could be made)
  bool written = false;    // false with a folder: the newest on disk was already as new
  std::string problem;     // without a folder: why none holds the state
};

// Called by every survivor of the generation whose world could not be formed, with the ring of
// the copies (of generation `copies_generation`) and the run (its strategy still set up on the
// old world). Blocks for at most the rounds' bounds: failure_timeout (at least 2 s) for every
// survivor to say what it holds, `write_bound` for the writes and the commit. Store errors pass
// through; a write that fails is reported in `problem`, on every survivor alike.
[[nodiscard]] SavedWithoutWorld save_without_world(ElasticWorld& elastic, CopyRing& ring,
                                                   std::int64_t copies_generation, RunControl& run,
                                                   Duration write_bound);

}  // namespace tessera::elastic
