#pragma once
// Durable file operations: the write-fsync-rename-fsync sequence that makes a commit atomic.

#include <cstddef>
#include <filesystem>
#include <span>
#include <string_view>
#include <vector>

namespace tessera::checkpoint {

// Errors begin with `role`, what the file is to the user ("checkpoint", "--summary file").

// Creates (or truncates) `path`, writes all of `bytes` and fsyncs it. Throws CheckpointError.
void write_file_synced(const std::filesystem::path& path, std::span<const std::byte> bytes,
                       std::string_view role = "checkpoint");
void write_file_synced(const std::filesystem::path& path, std::string_view text,
                       std::string_view role = "checkpoint");

// fsync on a folder, so the names created or renamed in it survive a crash.
void sync_directory(const std::filesystem::path& dir, std::string_view role = "checkpoint");

// Writes `text` to `path` atomically: a temporary sibling, fsync, rename, fsync of the folder.
void replace_file_atomically(const std::filesystem::path& path, std::string_view text,
                             std::string_view role = "checkpoint");

// The whole file. Throws CheckpointError naming the path.
[[nodiscard]] std::vector<std::byte> read_file(const std::filesystem::path& path);

}  // namespace tessera::checkpoint
