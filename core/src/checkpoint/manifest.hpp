#pragma once
// The manifest's text form: line-oriented so a person can read it and a truncation is
// detected (the last line is a CRC-32 over everything before it).

#include <string>
#include <vector>

#include "tessera/runtime/checkpoint.hpp"

namespace tessera::checkpoint {

inline constexpr const char* kManifestFile = "manifest";
inline constexpr int kFormatVersion = 1;

[[nodiscard]] std::string format_manifest(const CheckpointManifest& manifest);
// Throws CheckpointError naming `where` and the offending line.
[[nodiscard]] CheckpointManifest parse_manifest(const std::string& text, const std::string& where);

// One rank's blob list ("blob RANK BYTES CRC FILE NAME" lines), merged by rank 0.
[[nodiscard]] std::string format_blob_lines(const std::vector<CheckpointBlob>& blobs);
[[nodiscard]] std::vector<CheckpointBlob> parse_blob_lines(const std::string& text,
                                                           const std::string& where);

}  // namespace tessera::checkpoint
