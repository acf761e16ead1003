#include "checkpoint/manifest.hpp"

#include <charconv>
#include <cstdio>
#include <set>
#include <sstream>

#include "tessera/base/error.hpp"

namespace tessera::checkpoint {

namespace {

constexpr std::string_view kMagic = "tessera-checkpoint";
constexpr std::string_view kCrcKey = "manifest-crc32 ";

std::string hex32(std::uint32_t value) {
  char text[9];
  std::snprintf(text, sizeof text, "%08x", value);
  return text;
}

std::uint32_t text_crc(std::string_view text) {
  return crc32(std::as_bytes(std::span<const char>(text.data(), text.size())));
}

[[noreturn]] void bad(const std::string& where, std::size_t line, const std::string& what) {
  throw CheckpointError("checkpoint manifest " + where + ":" + std::to_string(line) + ": " + what);
}

template <class T>
T number(std::string_view text, int base, const std::string& where, std::size_t line) {
  T value{};
  const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), value, base);
  if (ec != std::errc() || end != text.data() + text.size())
    bad(where, line, "bad number '" + std::string(text) + "'");
  return value;
}

// "blob RANK BYTES CRC FILE NAME": the name is last, so it may contain spaces.
CheckpointBlob parse_blob(const std::string& rest, const std::string& where, std::size_t line) {
  std::istringstream in(rest);
  std::string rank, bytes, crc, file;
  if (!(in >> rank >> bytes >> crc >> file)) bad(where, line, "incomplete blob line");
  std::string name;
  std::getline(in >> std::ws, name);
  if (name.empty()) bad(where, line, "blob without a name");
  if (file.find('/') != std::string::npos || file == "..")
    bad(where, line, "blob file outside the checkpoint: " + file);
  return {name, file, number<std::uint64_t>(bytes, 10, where, line),
          number<std::uint32_t>(crc, 16, where, line), number<int>(rank, 10, where, line)};
}

}  // namespace

std::string format_blob_lines(const std::vector<CheckpointBlob>& blobs) {
  std::string text;
  for (const auto& b : blobs) {
    text += "blob " + std::to_string(b.rank) + " " + std::to_string(b.bytes) + " " +
            hex32(b.crc32) + " " + b.file + " " + b.name + "\n";
  }
  return text;
}

std::vector<CheckpointBlob> parse_blob_lines(const std::string& text, const std::string& where) {
  std::vector<CheckpointBlob> blobs;
  std::istringstream in(text);
  std::string line;
  for (std::size_t n = 1; std::getline(in, line); ++n) {
    if (line.rfind("blob ", 0) != 0) bad(where, n, "expected a blob line, got '" + line + "'");
    blobs.push_back(parse_blob(line.substr(5), where, n));
  }
  return blobs;
}

std::string format_manifest(const CheckpointManifest& manifest) {
  std::string text = std::string(kMagic) + " " + std::to_string(kFormatVersion) + "\n";
  text += "step " + std::to_string(manifest.step) + "\n";
  text += "world_size " + std::to_string(manifest.world_size) + "\n";
  for (const auto& [key, value] : manifest.metadata) {
    TESSERA_CHECK(
        key.find_first_of(" \n") == std::string::npos && value.find('\n') == std::string::npos,
        "checkpoint metadata may not contain newlines or spaces in keys: " + key);
    text += "meta " + key + " " + value + "\n";
  }
  text += format_blob_lines(manifest.blobs);
  text += std::string(kCrcKey) + hex32(text_crc(text)) + "\n";
  return text;
}

CheckpointManifest parse_manifest(const std::string& text, const std::string& where) {
  const auto crc_at = text.rfind(kCrcKey);
  if (crc_at == std::string::npos || (crc_at != 0 && text[crc_at - 1] != '\n')) {
    throw CheckpointError("checkpoint manifest " + where +
                          " is truncated (no manifest-crc32 line)");
  }
  const std::string body = text.substr(0, crc_at);
  // The last line is exactly eight hex digits and a newline; anything else (bytes appended,
  // a cut line) is reported as what it is rather than as a checksum that seems to match.
  const std::string_view stored_line = std::string_view(text).substr(crc_at + kCrcKey.size());
  const std::string_view stored_digits = stored_line.substr(0, 8);
  std::uint32_t stored = 0;
  const auto [end, ec] = std::from_chars(stored_digits.data(),
                                         stored_digits.data() + stored_digits.size(), stored, 16);
  if (stored_digits.size() != 8 || ec != std::errc() ||
      end != stored_digits.data() + stored_digits.size()) {
    throw CheckpointError("checkpoint manifest " + where +
                          " has a malformed manifest-crc32 line (expected 8 hex digits): the "
                          "file is truncated or corrupted");
  }
  if (stored_line.size() != 8 && stored_line.substr(8) != "\n") {
    const std::size_t extra = stored_line.size() - 8 - (stored_line[8] == '\n' ? 1 : 0);
    throw CheckpointError("checkpoint manifest " + where + " has " + std::to_string(extra) +
                          " unexpected bytes after its manifest-crc32 line: the file is corrupted");
  }
  const std::uint32_t computed = text_crc(body);
  if (stored != computed) {
    throw CheckpointError("checkpoint manifest " + where + " fails its CRC-32 (stored " +
                          hex32(stored) + ", computed over its first " +
                          std::to_string(body.size()) + " bytes " + hex32(computed) +
                          "): the file is corrupted");
  }
  CheckpointManifest manifest;
  std::istringstream in(body);
  std::string line;
  std::set<std::string> names;
  std::set<std::string> files;
  std::size_t step_line = 0;
  std::size_t world_line = 0;
  for (std::size_t n = 1; std::getline(in, line); ++n) {
    const auto space = line.find(' ');
    const std::string key = line.substr(0, space);
    const std::string rest = space == std::string::npos ? "" : line.substr(space + 1);
    if (n == 1) {
      if (key != kMagic) bad(where, n, "not a tessera checkpoint manifest");
      if (number<int>(rest, 10, where, n) != kFormatVersion)
        bad(where, n, "unsupported format version " + rest);
    } else if (key == "step") {
      if (step_line != 0) bad(where, n, "a second step line");
      step_line = n;
      manifest.step = number<std::int64_t>(rest, 10, where, n);
      if (manifest.step < 0) bad(where, n, "negative step " + rest);
    } else if (key == "world_size") {
      if (world_line != 0) bad(where, n, "a second world_size line");
      world_line = n;
      manifest.world_size = number<int>(rest, 10, where, n);
      if (manifest.world_size < 1) bad(where, n, "world_size " + rest + " is not a world");
    } else if (key == "meta") {
      const auto sep = rest.find(' ');
      const std::string meta_key = rest.substr(0, sep);
      if (meta_key.empty()) bad(where, n, "a meta line without a key");
      if (!manifest.metadata.emplace(meta_key, sep == std::string::npos ? "" : rest.substr(sep + 1))
               .second)
        bad(where, n, "meta '" + meta_key + "' appears twice");
    } else if (key == "blob") {
      auto blob = parse_blob(rest, where, n);
      if (world_line == 0) bad(where, n, "a blob line before the world_size line");
      if (blob.rank < 0 || blob.rank >= manifest.world_size) {
        bad(where, n,
            "blob '" + blob.name + "' was written by rank " + std::to_string(blob.rank) +
                ", outside the manifest's world of " + std::to_string(manifest.world_size));
      }
      // The writer names each rank's files r<rank>-<k>.bin, so a file of another rank is an
      // edit, and two blobs sharing a file cannot both verify.
      const std::string prefix = "r" + std::to_string(blob.rank) + "-";
      if (blob.file.rfind(prefix, 0) != 0 || blob.file.size() <= prefix.size() + 4 ||
          blob.file.substr(blob.file.size() - 4) != ".bin" ||
          blob.file.find_first_not_of("0123456789", prefix.size()) != blob.file.size() - 4) {
        bad(where, n,
            "blob '" + blob.name + "' of rank " + std::to_string(blob.rank) + " is in file " +
                blob.file + ", not one of that rank's files (" + prefix + "<k>.bin)");
      }
      if (!names.insert(blob.name).second) bad(where, n, "blob '" + blob.name + "' appears twice");
      if (!files.insert(blob.file).second) bad(where, n, "file " + blob.file + " appears twice");
      manifest.blobs.push_back(std::move(blob));
    } else {
      bad(where, n, "unknown line '" + line + "'");
    }
  }
  if (step_line == 0 || world_line == 0) {
    throw CheckpointError("checkpoint manifest " + where + " has no " +
                          (step_line == 0 ? "step" : "world_size") + " line");
  }
  return manifest;
}

}  // namespace tessera::checkpoint
