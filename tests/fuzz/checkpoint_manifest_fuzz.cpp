// Fuzz target: a checkpoint's manifest text and a rank's blob list, as read back from disk, in
// either format: JSON (format 2) or round one's lines (format 1). The first input byte chooses
// whether the manifest's CRC is made correct (a JSON object is resealed, a line manifest gets a
// CRC line).
// Bad text must give a CheckpointError; text that parses must survive a round trip through
// the writer unchanged, or the writer could produce a manifest the reader misreads.

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <nlohmann/json.hpp>
#include <string>

#include "fuzz_support.hpp"
#include "manifest.hpp"
#include "tessera/base/error.hpp"
#include "tessera/runtime/checkpoint.hpp"

namespace {

bool same(const tessera::CheckpointBlob& a, const tessera::CheckpointBlob& b) {
  return a.name == b.name && a.file == b.file && a.bytes == b.bytes && a.crc32 == b.crc32 &&
         a.rank == b.rank && a.slice == b.slice;
}

std::string crc_text(const std::string& text) {
  char crc[16];
  std::snprintf(crc, sizeof crc, "%08x",
                tessera::crc32(std::as_bytes(std::span<const char>(text.data(), text.size()))));
  return crc;
}

// `text` with a correct CRC: format 1 gets a CRC line, a JSON object its "manifest_crc32"
// recomputed as the reader does. Text that is neither is returned as it is.
std::string sealed(std::string text) {
  if (text.rfind("tessera-checkpoint ", 0) == 0)
    return text + "manifest-crc32 " + crc_text(text) + "\n";
  auto j = nlohmann::ordered_json::parse(text, nullptr, false);
  if (!j.is_object()) return text;
  j.erase("manifest_crc32");
  try {
    j["manifest_crc32"] =
        crc_text(j.dump(2, ' ', false, nlohmann::ordered_json::error_handler_t::strict));
    return j.dump(2) + "\n";
  } catch (const nlohmann::ordered_json::exception&) {
    return text;
  }
}

bool same(const std::vector<tessera::CheckpointBlob>& a,
          const std::vector<tessera::CheckpointBlob>& b) {
  if (a.size() != b.size()) return false;
  for (std::size_t i = 0; i < a.size(); ++i)
    if (!same(a[i], b[i])) return false;
  return true;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  namespace cp = tessera::checkpoint;
  if (size == 0) return 0;
  // A first byte with its low bit set asks for the text with a correct CRC line appended, so
  // that the fuzzer reaches the line parser instead of stopping at the checksum.
  std::string text(tessera::fuzz::as_text(data + 1, size - 1));
  if (data[0] & 1) text = sealed(std::move(text));
  try {
    const auto manifest = cp::parse_manifest(text, "fuzz/manifest");
    const auto again = cp::parse_manifest(cp::format_manifest(manifest), "fuzz/manifest");
    if (again.step != manifest.step || again.world_size != manifest.world_size ||
        again.format_version != tessera::checkpoint::kFormatVersion ||
        again.metadata != manifest.metadata || !same(again.blobs, manifest.blobs))
      std::abort();  // the writer's text reads back as another manifest
  } catch (const tessera::CheckpointError& e) {
    tessera::fuzz::require_own_words(e);
  }
  try {
    const auto blobs = cp::parse_blob_lines(text, "fuzz/blobs");
    if (!same(cp::parse_blob_lines(cp::format_blob_lines(blobs), "fuzz/blobs"), blobs))
      std::abort();
  } catch (const tessera::CheckpointError& e) {
    tessera::fuzz::require_own_words(e);
  }
  return 0;
}
