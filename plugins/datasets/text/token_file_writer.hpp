#pragma once
// Writes a token file (token_file.hpp) atomically, tokens streamed in: a temporary sibling of the
// target, header last (its count and checksum are known only at the end), fsync, rename, fsync of
// the folder. A reader sees the old file or the whole new one, never a part (as checkpoints are
// committed).

#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <span>

#include "text/token_file.hpp"

namespace tessera::text {

// Not thread-safe. Destroyed without commit(), it removes its temporary and leaves the target
// as it was.
class TokenFileWriter {
 public:
  // Creates the temporary `<target>.tmp-<pid>` next to `target`. Throws DataError naming it.
  explicit TokenFileWriter(std::filesystem::path target);
  ~TokenFileWriter();
  TokenFileWriter(const TokenFileWriter&) = delete;
  TokenFileWriter& operator=(const TokenFileWriter&) = delete;

  void append(std::span<const std::byte> tokens);
  [[nodiscard]] std::uint64_t token_count() const noexcept { return header_.token_count; }

  // Writes the header with `split` (<= token_count()), syncs and renames onto the target.
  // Returns the header written. Throws DataError naming the file that failed.
  TokenFileHeader commit(std::uint64_t split);

 private:
  void write_at(std::span<const std::byte> bytes, std::uint64_t offset);

  std::filesystem::path target_;
  std::filesystem::path temporary_;
  int fd_ = -1;
  TokenFileHeader header_;
};

}  // namespace tessera::text
