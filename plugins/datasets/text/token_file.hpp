#pragma once
// The prepared token file: a 48-byte header, then one byte per token. `tessera data prepare`
// writes it once from a corpus; every rank then maps it instead of re-reading the corpus.
//
//   offset  bytes  field (integers little-endian)
//        0      8  magic "TSRTOKNS"
//        8      4  format version (kTokenFileVersion)
//       12      4  vocabulary size (256: byte-level tokens)
//       16      4  bytes per token (1)
//       20      4  reserved, 0
//       24      8  token count N
//       32      8  split: tokens [0, split) are training, [split, N) validation
//       40      4  CRC-32 (zlib's) of the N token bytes
//       44      4  CRC-32 of header bytes 0..43
//       48      N  the tokens
//
// The header's own checksum lets a reader refuse a damaged header before it trusts the count.

#include <array>
#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <span>
#include <string>

namespace tessera::text {

inline constexpr std::size_t kTokenFileHeaderBytes = 48;
inline constexpr std::uint32_t kTokenFileVersion = 1;
inline constexpr std::uint32_t kByteVocabulary = 256;
inline constexpr std::array<char, 8> kTokenFileMagic = {'T', 'S', 'R', 'T', 'O', 'K', 'N', 'S'};

struct TokenFileHeader {
  std::uint64_t token_count = 0;
  std::uint64_t split = 0;  // first validation token
  std::uint32_t token_crc = 0;
};

// The header's 48 bytes for `header` (version, vocabulary and token width are the constants).
[[nodiscard]] std::array<std::byte, kTokenFileHeaderBytes> encode_token_file_header(
    const TokenFileHeader& header);

// Parses and checks the first bytes of a token file whose whole size is `file_bytes`: magic,
// version, header checksum, vocabulary, token width, reserved field, split within the count,
// and a size of exactly header + count. Does not check the tokens' checksum (the caller holds
// them). Throws DataError naming `file` and saying what to do.
[[nodiscard]] TokenFileHeader parse_token_file_header(std::span<const std::byte> bytes,
                                                      std::uint64_t file_bytes,
                                                      const std::filesystem::path& file);

// zlib's CRC-32 of `bytes`, continuing from `crc` (0 to start).
[[nodiscard]] std::uint32_t crc32_of(std::span<const std::byte> bytes, std::uint32_t crc = 0);

// What a refusal tells the user to do, e.g. "run `tessera data prepare --output FILE`".
[[nodiscard]] std::string prepare_hint(const std::filesystem::path& file);

// A token file mapped read-only: the tokens stay in the page cache that every rank on the host
// shares. Opening checks the header and the tokens' checksum (one read of the mapping).
// Immutable after construction, so thread-safe; movable, not copyable.
class MappedTokenFile {
 public:
  // Throws DataError naming `file`: missing, not a regular file, unreadable, or anything
  // parse_token_file_header refuses, or tokens whose CRC-32 differs from the header's.
  explicit MappedTokenFile(const std::filesystem::path& file);
  ~MappedTokenFile();
  MappedTokenFile(MappedTokenFile&& other) noexcept;
  MappedTokenFile& operator=(MappedTokenFile&& other) noexcept;
  MappedTokenFile(const MappedTokenFile&) = delete;
  MappedTokenFile& operator=(const MappedTokenFile&) = delete;

  [[nodiscard]] const TokenFileHeader& header() const noexcept { return header_; }
  // All N tokens, training first.
  [[nodiscard]] std::span<const std::uint8_t> tokens() const noexcept;

 private:
  void unmap() noexcept;
  void* mapping_ = nullptr;
  std::size_t mapping_bytes_ = 0;
  TokenFileHeader header_;
};

}  // namespace tessera::text
