#include <zlib.h>

#include <algorithm>
#include <charconv>
#include <cstring>
#include <fstream>
#include <optional>
#include <string_view>

#include "durable_file.hpp"
#include "manifest.hpp"
#include "tessera/base/error.hpp"
#include "tessera/runtime/checkpoint.hpp"

namespace tessera {

std::uint32_t crc32(std::span<const std::byte> bytes, std::uint32_t crc) noexcept {
  // zlib takes uInt lengths; feed large blobs in pieces.
  constexpr std::size_t kChunk = std::size_t{1} << 30;
  auto value = static_cast<uLong>(crc);
  for (std::size_t at = 0; at < bytes.size(); at += kChunk) {
    const std::size_t n = std::min(kChunk, bytes.size() - at);
    value = ::crc32(value, reinterpret_cast<const Bytef*>(bytes.data() + at), static_cast<uInt>(n));
  }
  return static_cast<std::uint32_t>(value);
}

namespace {

namespace fs = std::filesystem;

std::string text_of(const std::vector<std::byte>& bytes) {
  return {reinterpret_cast<const char*>(bytes.data()), bytes.size()};
}

// "<prefix><digits><suffix>" -> the number, or nullopt.
std::optional<std::int64_t> numbered_name(const std::string& name, std::string_view prefix,
                                          std::string_view suffix) {
  if (name.size() <= prefix.size() + suffix.size() || name.rfind(prefix, 0) != 0 ||
      name.compare(name.size() - suffix.size(), suffix.size(), suffix) != 0)
    return std::nullopt;
  const std::string_view digits =
      std::string_view(name).substr(prefix.size(), name.size() - prefix.size() - suffix.size());
  std::int64_t value = 0;
  const auto [end, ec] = std::from_chars(digits.data(), digits.data() + digits.size(), value);
  if (ec != std::errc() || end != digits.data() + digits.size() || digits.front() == '-')
    return std::nullopt;
  return value;
}

bool same_blob(const CheckpointBlob& a, const CheckpointBlob& b) {
  return a.name == b.name && a.file == b.file && a.bytes == b.bytes && a.crc32 == b.crc32 &&
         a.rank == b.rank && a.slice == b.slice;
}

// The manifest against the folder it sits in, before any blob is read: the step agrees with a
// step-<N> folder name, and the ranks that left files (rank-<r>.blobs, r<r>-<k>.bin) are
// exactly the manifest's world, each with the blobs the manifest gives it.
void check_manifest_against_folder(const fs::path& folder, const CheckpointManifest& manifest) {
  const std::string where = "checkpoint " + folder.string() + ": ";
  const auto folder_step = numbered_name(folder.filename().string(), "step-", "");
  if (folder_step && *folder_step != manifest.step) {
    throw CheckpointError(where + "the manifest says step " + std::to_string(manifest.step) +
                          ", the folder's name step " + std::to_string(*folder_step) +
                          ": the manifest belongs to another checkpoint or was edited");
  }
  std::vector<bool> has_rank_file(static_cast<std::size_t>(manifest.world_size), false);
  for (const auto& entry : fs::directory_iterator(folder)) {
    const auto name = entry.path().filename().string();
    std::optional<std::int64_t> rank = numbered_name(name, "rank-", ".blobs");
    if (!rank && name.front() == 'r' && name.find('-') != std::string::npos) {
      rank = numbered_name(name.substr(0, name.find('-') + 1), "r", "-");
    }
    if (!rank) continue;
    if (*rank >= manifest.world_size) {
      throw CheckpointError(where + "holds " + name + " of rank " + std::to_string(*rank) +
                            ", but the manifest says the checkpoint was written by " +
                            std::to_string(manifest.world_size) + " ranks");
    }
    if (name.rfind("rank-", 0) != 0) continue;
    has_rank_file[static_cast<std::size_t>(*rank)] = true;
    const auto listed = checkpoint::parse_blob_lines(text_of(checkpoint::read_file(entry.path())),
                                                     entry.path().string());
    std::vector<CheckpointBlob> in_manifest;
    for (const auto& blob : manifest.blobs) {
      if (blob.rank == *rank) in_manifest.push_back(blob);
    }
    if (!std::equal(listed.begin(), listed.end(), in_manifest.begin(), in_manifest.end(),
                    same_blob)) {
      throw CheckpointError(where + "rank " + std::to_string(*rank) + " wrote " +
                            std::to_string(listed.size()) + " blobs (" + name +
                            "), the manifest lists " + std::to_string(in_manifest.size()) +
                            " others: the manifest does not describe this folder");
    }
  }
  for (std::size_t r = 0; r < has_rank_file.size(); ++r) {
    if (!has_rank_file[r]) {
      throw CheckpointError(where + "the manifest says " + std::to_string(manifest.world_size) +
                            " ranks wrote it, but rank-" + std::to_string(r) +
                            ".blobs is missing: the checkpoint is incomplete");
    }
  }
}

}  // namespace

FileCheckpointReader::FileCheckpointReader(std::filesystem::path folder)
    : folder_(std::move(folder)) {
  const auto manifest_path = folder_ / checkpoint::kManifestFile;
  if (!std::filesystem::exists(manifest_path)) {
    throw CheckpointError("checkpoint " + folder_.string() + " has no manifest: it is incomplete");
  }
  manifest_ = checkpoint::parse_manifest(text_of(checkpoint::read_file(manifest_path)),
                                         manifest_path.string());
  check_manifest_against_folder(folder_, manifest_);
  for (std::size_t i = 0; i < manifest_.blobs.size(); ++i) {
    (void)read_verified(manifest_.blobs[i]);
    if (manifest_.blobs[i].slice) slice_blobs_.push_back(i);
  }
}

std::vector<StateSlice> FileCheckpointReader::slices() const {
  std::vector<StateSlice> out;
  out.reserve(slice_blobs_.size());
  for (const auto i : slice_blobs_) out.push_back(*manifest_.blobs[i].slice);
  return out;
}

std::vector<float> FileCheckpointReader::slice_values(std::size_t index) const {
  TESSERA_CHECK(index < slice_blobs_.size(), "slice_values: no slice " + std::to_string(index));
  const auto& blob = manifest_.blobs[slice_blobs_[index]];
  const auto bytes = read_verified(blob);
  // The manifest tied bytes to the slice's element count; read_verified checked the size.
  std::vector<float> values(bytes.size() / sizeof(float));
  std::memcpy(values.data(), bytes.data(), values.size() * sizeof(float));
  return values;
}

std::vector<std::byte> FileCheckpointReader::read_verified(const CheckpointBlob& blob) const {
  const auto path = folder_ / blob.file;
  std::error_code ec;
  const auto size = std::filesystem::file_size(path, ec);
  if (ec)
    throw CheckpointError("checkpoint " + folder_.string() + ": blob '" + blob.name + "' file " +
                          blob.file + " is missing");
  if (size != blob.bytes) {
    throw CheckpointError("checkpoint " + folder_.string() + ": blob '" + blob.name + "' file " +
                          blob.file + " has " + std::to_string(size) +
                          " bytes, the manifest says " + std::to_string(blob.bytes) +
                          " (truncated or overwritten)");
  }
  auto data = checkpoint::read_file(path);
  if (crc32(data) != blob.crc32) {
    throw CheckpointError("checkpoint " + folder_.string() + ": blob '" + blob.name + "' file " +
                          blob.file + " fails its CRC-32: the data is corrupted");
  }
  return data;
}

std::vector<std::byte> FileCheckpointReader::get(const std::string& name) const {
  for (const auto& blob : manifest_.blobs) {
    if (blob.name == name) return read_verified(blob);
  }
  throw CheckpointError("checkpoint " + folder_.string() + " has no blob '" + name + "'");
}

bool FileCheckpointReader::contains(const std::string& name) const {
  for (const auto& blob : manifest_.blobs) {
    if (blob.name == name) return true;
  }
  return false;
}

std::unique_ptr<FileCheckpointReader> open_newest_checkpoint(const std::filesystem::path& root) {
  const auto folders = list_checkpoints(root);
  if (folders.empty()) return nullptr;
  try {
    return std::make_unique<FileCheckpointReader>(folders.back());
  } catch (const CheckpointError& e) {
    std::string older;
    for (std::size_t i = 0; i + 1 < folders.size(); ++i) {
      older += (older.empty() ? "" : ", ") + folders[i].filename().string();
    }
    throw CheckpointError(
        std::string(e.what()) + "; refusing to resume from it, or to pass it over" +
        (older.empty()
             ? std::string(": no other checkpoint is on disk; remove or move it to start afresh")
             : "; older checkpoints kept: " + older + ". To resume from " +
                   folders[folders.size() - 2].filename().string() + ", move " +
                   folders.back().string() + " out of " + root.string()));
  }
}

}  // namespace tessera
