#pragma once
// The manifest's text form: JSON (format 2), with a CRC-32 over its canonical text so that a
// truncation or an edit is detected. Format 1 (round one's line format, whose last line is a
// CRC-32 over everything before it) is still read, never written.

#include <string>
#include <vector>

#include "tessera/runtime/checkpoint.hpp"

namespace tessera::checkpoint {

inline constexpr const char* kManifestFile = "manifest";
inline constexpr int kFormatVersion = 2;

[[nodiscard]] std::string format_manifest(const CheckpointManifest& manifest);
// Either format. Throws CheckpointError naming `where` and the offending line or field.
[[nodiscard]] CheckpointManifest parse_manifest(const std::string& text, const std::string& where);

// One rank's blob list (a JSON array; format 1: "blob RANK BYTES CRC FILE NAME" lines), merged
// by rank 0.
[[nodiscard]] std::string format_blob_lines(const std::vector<CheckpointBlob>& blobs);
[[nodiscard]] std::vector<CheckpointBlob> parse_blob_lines(const std::string& text,
                                                           const std::string& where);

}  // namespace tessera::checkpoint
