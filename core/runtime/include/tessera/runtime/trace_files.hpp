#pragma once
// The files `--trace FILE` makes (docs/tracing.md): one Chrome trace-event JSON file per rank,
// so that every transport (threads of one process, processes, hosts) writes its own without
// coordination, and a merge into one file for viewers that open one file at a time.

#include <filesystem>
#include <vector>

namespace tessera {

// Rank `rank`'s file for FILE: ".rank<R>" inserted before FILE's extension ("run.json" ->
// "run.rank1.json", "run" -> "run.rank1").
[[nodiscard]] std::filesystem::path trace_file_for_rank(const std::filesystem::path& file,
                                                        int rank);

// Checks, before anything trains, that rank `rank`'s trace for FILE can be created: creates
// and removes its temporary file. Throws ConfigError naming [train] trace_file (--trace) and
// the path otherwise.
void check_trace_destination(const std::filesystem::path& file, int rank);

// Merges per-rank traces (each pid is its rank) into one file: the events of all of them,
// each file's otherData under "ranks". Written atomically (temporary sibling, rename). Throws
// Error naming the file for one that cannot be read or is not a tessera trace, or for two files
// of the same rank.
void merge_trace_files(const std::vector<std::filesystem::path>& inputs,
                       const std::filesystem::path& output);

}  // namespace tessera
