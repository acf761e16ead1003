#include "checkpoint/manifest.hpp"

#include <charconv>
#include <cstdio>
#include <set>
#include <sstream>

#include "tessera/error.hpp"

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
  std::string stored = text.substr(crc_at + kCrcKey.size());
  if (!stored.empty() && stored.back() == '\n') stored.pop_back();
  if (stored != hex32(text_crc(body))) {
    throw CheckpointError("checkpoint manifest " + where + " fails its CRC-32 (stored " + stored +
                          ", computed " + hex32(text_crc(body)) + "): the file is corrupted");
  }
  CheckpointManifest manifest;
  std::istringstream in(body);
  std::string line;
  std::set<std::string> names;
  for (std::size_t n = 1; std::getline(in, line); ++n) {
    const auto space = line.find(' ');
    const std::string key = line.substr(0, space);
    const std::string rest = space == std::string::npos ? "" : line.substr(space + 1);
    if (n == 1) {
      if (key != kMagic) bad(where, n, "not a tessera checkpoint manifest");
      if (number<int>(rest, 10, where, n) != kFormatVersion)
        bad(where, n, "unsupported format version " + rest);
    } else if (key == "step") {
      manifest.step = number<std::int64_t>(rest, 10, where, n);
    } else if (key == "world_size") {
      manifest.world_size = number<int>(rest, 10, where, n);
    } else if (key == "meta") {
      const auto sep = rest.find(' ');
      manifest.metadata[rest.substr(0, sep)] = sep == std::string::npos ? "" : rest.substr(sep + 1);
    } else if (key == "blob") {
      auto blob = parse_blob(rest, where, n);
      if (!names.insert(blob.name).second) bad(where, n, "blob '" + blob.name + "' appears twice");
      manifest.blobs.push_back(std::move(blob));
    } else {
      bad(where, n, "unknown line '" + line + "'");
    }
  }
  return manifest;
}

}  // namespace tessera::checkpoint
