#pragma once
// What the fuzz targets share: a scratch file for readers that take a path, and the blob
// container the checkpoint-shard target reads its input as.

#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <exception>
#include <filesystem>
#include <fstream>
#include <map>
#include <string>
#include <string_view>

namespace tessera::fuzz {

// A refusal must be in tessera's words: the JSON library's own text ("[json.exception...") in
// a message is a place that let it through untranslated, a finding like a crash.
inline void require_own_words(const std::exception& e) {
  if (std::string_view(e.what()).find("json.exception") != std::string_view::npos) std::abort();
}

// A folder of this process's own under the temporary folder, removed at exit.
class ScratchFolder {
 public:
  explicit ScratchFolder(const std::string& name)
      : path_(std::filesystem::temp_directory_path() /
              ("tessera-fuzz-" + name + "-" + std::to_string(::getpid()))) {
    std::filesystem::create_directories(path_);
  }
  ~ScratchFolder() {
    std::error_code ec;
    std::filesystem::remove_all(path_, ec);
  }
  ScratchFolder(const ScratchFolder&) = delete;
  ScratchFolder& operator=(const ScratchFolder&) = delete;

  [[nodiscard]] const std::filesystem::path& path() const noexcept { return path_; }

  // Writes `bytes` to `name` in the folder (replacing it) and returns its path.
  std::filesystem::path write(const std::string& name, std::string_view bytes) const {
    const auto file = path_ / name;
    std::ofstream out(file, std::ios::binary | std::ios::trunc);
    out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
    return file;
  }

 private:
  std::filesystem::path path_;
};

inline std::string_view as_text(const std::uint8_t* data, std::size_t size) {
  return {reinterpret_cast<const char*>(data), size};
}

// Blobs in a readable container: each starts with a line "@@ NAME" and runs up to the newline
// before the next such line (or the end). Text before the first marker is ignored.
inline std::map<std::string, std::string> split_blobs(std::string_view text) {
  std::map<std::string, std::string> blobs;
  constexpr std::string_view kMarker = "@@ ";
  std::size_t at = text.starts_with(kMarker) ? 0 : text.find("\n@@ ");
  if (at != std::string_view::npos && at != 0) ++at;
  while (at != std::string_view::npos && at < text.size()) {
    const auto name_end = text.find('\n', at);
    if (name_end == std::string_view::npos) break;
    const auto name = text.substr(at + kMarker.size(), name_end - at - kMarker.size());
    auto next = text.find("\n@@ ", name_end);
    const auto end = next == std::string_view::npos ? text.size() : next;
    blobs[std::string(name)] = std::string(text.substr(name_end + 1, end - name_end - 1));
    at = next == std::string_view::npos ? next : next + 1;
  }
  return blobs;
}

}  // namespace tessera::fuzz
