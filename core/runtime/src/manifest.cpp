#include "manifest.hpp"

#include <charconv>
#include <cstdio>
#include <set>
#include <sstream>

#include "json_fields.hpp"
#include "tessera/base/error.hpp"

namespace tessera::checkpoint {

namespace {

constexpr std::string_view kMagic = "tessera-checkpoint";
constexpr std::string_view kCrcKey = "manifest-crc32 ";

std::uint32_t text_crc(std::string_view text) {
  return crc32(std::as_bytes(std::span<const char>(text.data(), text.size())));
}

[[noreturn]] void bad(const std::string& where, std::size_t line, const std::string& what) {
  throw CheckpointError("checkpoint manifest " + where + ":" + std::to_string(line) + ": " + what);
}

// The writer names each rank's files r<rank>-<k>.bin, so a file of another rank is an edit, and
// two blobs sharing a file cannot both verify.
std::string file_problem(const CheckpointBlob& blob) {
  const std::string prefix = "r" + std::to_string(blob.rank) + "-";
  if (blob.file.rfind(prefix, 0) != 0 || blob.file.size() <= prefix.size() + 4 ||
      blob.file.substr(blob.file.size() - 4) != ".bin" ||
      blob.file.find_first_not_of("0123456789", prefix.size()) != blob.file.size() - 4) {
    return "blob '" + blob.name + "' of rank " + std::to_string(blob.rank) + " is in file " +
           blob.file + ", not one of that rank's files (" + prefix + "<k>.bin)";
  }
  return {};
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
  return {name,
          file,
          number<std::uint64_t>(bytes, 10, where, line),
          number<std::uint32_t>(crc, 16, where, line),
          number<int>(rank, 10, where, line),
          std::nullopt};
}

std::vector<CheckpointBlob> parse_blob_lines_v1(const std::string& text, const std::string& where) {
  std::vector<CheckpointBlob> blobs;
  std::istringstream in(text);
  std::string line;
  for (std::size_t n = 1; std::getline(in, line); ++n) {
    if (line.rfind("blob ", 0) != 0) bad(where, n, "expected a blob line, got '" + line + "'");
    blobs.push_back(parse_blob(line.substr(5), where, n));
  }
  return blobs;
}

CheckpointManifest parse_manifest_v1(const std::string& text, const std::string& where) {
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
  manifest.format_version = 1;
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
      if (number<int>(rest, 10, where, n) != 1) bad(where, n, "unsupported format version " + rest);
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
      if (const auto problem = file_problem(blob); !problem.empty()) bad(where, n, problem);
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

// Format 2: JSON. The manifest's own CRC-32 is over the canonical text (dump with two-space
// indent) of the document without its "manifest_crc32" field, so truncation and edits are both
// caught while the file stays plain JSON that any tool can read.
constexpr const char* kCrcField = "manifest_crc32";

Json blob_to_json(const CheckpointBlob& blob) {
  Json j;
  j["name"] = blob.name;
  j["rank"] = blob.rank;
  j["file"] = blob.file;
  j["bytes"] = blob.bytes;
  j["crc32"] = hex32(blob.crc32);
  if (blob.slice) j["slice"] = slice_to_json(*blob.slice);
  return j;
}

CheckpointBlob blob_from_json(const Json& j, const std::string& where) {
  if (!j.is_object()) throw CheckpointError(where + ": a blob is not a JSON object");
  for (const auto& item : j.items()) {
    const auto& k = item.key();
    if (k != "name" && k != "rank" && k != "file" && k != "bytes" && k != "crc32" && k != "slice")
      bad_field(where, k, "is not a blob field");
  }
  CheckpointBlob blob;
  blob.name = string_field(j, "name", where);
  const std::string at = where + " (blob '" + blob.name + "')";
  if (blob.name.empty() || blob.name.find('\n') != std::string::npos)
    bad_field(at, "name", "is not one non-empty line");
  blob.rank = integer_field<int>(j, "rank", at);
  blob.file = string_field(j, "file", at);
  blob.bytes = integer_field<std::uint64_t>(j, "bytes", at);
  blob.crc32 = crc_field(j, "crc32", at);
  if (j.contains("slice")) {
    blob.slice = slice_from_json(j["slice"], at);
    // The name is derived from the description, so the two cannot disagree unnoticed.
    if (blob.name != slice_blob_name(*blob.slice))
      bad_field(at, "name", "does not match its slice (" + slice_blob_name(*blob.slice) + ")");
    if (blob.bytes != blob.slice->elements() * sizeof(float)) {
      bad_field(at, "bytes",
                "is " + std::to_string(blob.bytes) + ", its slice holds " +
                    std::to_string(blob.slice->elements()) + " floats");
    }
  }
  return blob;
}

std::vector<CheckpointBlob> blobs_from_json(const Json& j, const std::string& where) {
  if (!j.is_array()) throw CheckpointError(where + ": the blob list is not a JSON array");
  std::vector<CheckpointBlob> blobs;
  for (std::size_t i = 0; i < j.size(); ++i)
    blobs.push_back(blob_from_json(j[i], where + " blob " + std::to_string(i)));
  return blobs;
}

void check_files(const std::vector<CheckpointBlob>& blobs, const std::string& where) {
  for (const auto& blob : blobs) {
    if (const auto problem = file_problem(blob); !problem.empty())
      throw CheckpointError(where + ": " + problem);
  }
}

// JSON text is UTF-8: a name or value that is not is refused here, at commit, rather than
// written in a form that reads back as another string.
std::string dump_strict(const Json& j, int indent, const std::string& what) {
  try {
    return j.dump(indent, ' ', false, Json::error_handler_t::strict);
  } catch (const Json::type_error& e) {
    throw CheckpointError("checkpoint " + what +
                          ": a blob name or metadata entry is not valid "
                          "UTF-8 (" +
                          json_error_words(e.what()) + "); name blobs and metadata in UTF-8");
  }
}

bool is_v1_text(const std::string& text) {
  return text.rfind(std::string(kMagic) + " ", 0) == 0 || text.rfind("blob ", 0) == 0;
}

}  // namespace

std::string format_blob_lines(const std::vector<CheckpointBlob>& blobs) {
  Json list = Json::array();
  for (const auto& b : blobs) list.push_back(blob_to_json(b));
  return dump_strict(list, -1, "blob list") + "\n";
}

std::vector<CheckpointBlob> parse_blob_lines(const std::string& text, const std::string& where) {
  if (text.empty() || is_v1_text(text)) {
    auto blobs = parse_blob_lines_v1(text, where);
    check_files(blobs, where);
    return blobs;
  }
  auto blobs = blobs_from_json(parse_json(text, where), where);
  check_files(blobs, where);
  return blobs;
}

std::string format_manifest(const CheckpointManifest& manifest) {
  Json j;
  j["format"] = std::string(kMagic);
  j["version"] = kFormatVersion;
  j["step"] = manifest.step;
  j["world_size"] = manifest.world_size;
  j["metadata"] = Json::object();
  for (const auto& [key, value] : manifest.metadata) j["metadata"][key] = value;
  j["blobs"] = Json::array();
  for (const auto& b : manifest.blobs) j["blobs"].push_back(blob_to_json(b));
  j[kCrcField] = hex32(text_crc(dump_strict(j, 2, "manifest")));
  return dump_strict(j, 2, "manifest") + "\n";
}

CheckpointManifest parse_manifest(const std::string& text, const std::string& where) {
  if (is_v1_text(text)) return parse_manifest_v1(text, where);
  const std::string at = "checkpoint manifest " + where;
  Json j = parse_json(text, at);
  if (!j.is_object()) throw CheckpointError(at + " is not a JSON object: it is not a manifest");
  const auto format =
      j.contains("format") && j["format"].is_string() ? j["format"].get<std::string>() : "";
  if (format != kMagic)
    throw CheckpointError(
        at + " is not a tessera checkpoint manifest (no \"format\": \"tessera-checkpoint\")");
  const auto version = integer_field<int>(j, "version", at);
  if (version != kFormatVersion) {
    throw CheckpointError(at + " has format version " + std::to_string(version) +
                          ", this tessera reads versions 1 and " + std::to_string(kFormatVersion) +
                          ": use the tessera that wrote it");
  }
  const auto stored = crc_field(j, kCrcField, at);
  j.erase(kCrcField);
  const auto canonical = j.dump(2, ' ', false, Json::error_handler_t::replace);
  const auto computed = text_crc(canonical);
  if (stored != computed) {
    throw CheckpointError(at + " fails its CRC-32 (stored " + hex32(stored) + ", computed " +
                          hex32(computed) + "): the file is corrupted or was edited");
  }
  for (const auto& item : j.items()) {
    const auto& k = item.key();
    if (k != "format" && k != "version" && k != "step" && k != "world_size" && k != "metadata" &&
        k != "blobs")
      bad_field(at, k, "is not a manifest field");
  }
  CheckpointManifest manifest;
  manifest.format_version = version;
  manifest.step = integer_field<std::int64_t>(j, "step", at);
  if (manifest.step < 0) bad_field(at, "step", "is negative: " + std::to_string(manifest.step));
  manifest.world_size = integer_field<int>(j, "world_size", at);
  if (manifest.world_size < 1)
    bad_field(at, "world_size", "is " + std::to_string(manifest.world_size) + ", not a world");
  const auto& metadata = member(j, "metadata", at);
  if (!metadata.is_object()) bad_field(at, "metadata", "is not an object");
  for (const auto& item : metadata.items()) {
    if (!item.value().is_string()) bad_field(at + " metadata", item.key(), "is not a string");
    manifest.metadata.emplace(item.key(), item.value().get<std::string>());
  }
  manifest.blobs = blobs_from_json(member(j, "blobs", at), at);
  std::set<std::string> names;
  std::set<std::string> files;
  for (const auto& blob : manifest.blobs) {
    if (blob.rank < 0 || blob.rank >= manifest.world_size) {
      throw CheckpointError(at + ": blob '" + blob.name + "' was written by rank " +
                            std::to_string(blob.rank) + ", outside the manifest's world of " +
                            std::to_string(manifest.world_size));
    }
    if (const auto problem = file_problem(blob); !problem.empty())
      throw CheckpointError(at + ": " + problem);
    if (!names.insert(blob.name).second)
      throw CheckpointError(at + ": blob '" + blob.name + "' appears twice");
    if (!files.insert(blob.file).second)
      throw CheckpointError(at + ": file " + blob.file + " appears twice");
  }
  return manifest;
}

}  // namespace tessera::checkpoint
