#include <zlib.h>

#include <fstream>

#include "checkpoint/durable_file.hpp"
#include "checkpoint/manifest.hpp"
#include "tessera/checkpoint.hpp"
#include "tessera/error.hpp"

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

FileCheckpointReader::FileCheckpointReader(std::filesystem::path folder)
    : folder_(std::move(folder)) {
  const auto manifest_path = folder_ / checkpoint::kManifestFile;
  if (!std::filesystem::exists(manifest_path)) {
    throw CheckpointError("checkpoint " + folder_.string() + " has no manifest: it is incomplete");
  }
  const auto bytes = checkpoint::read_file(manifest_path);
  manifest_ = checkpoint::parse_manifest(
      std::string(reinterpret_cast<const char*>(bytes.data()), bytes.size()),
      manifest_path.string());
  for (const auto& blob : manifest_.blobs) (void)read_verified(blob);
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

}  // namespace tessera
