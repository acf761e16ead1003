#include "text/token_file.hpp"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <limits>
#include <utility>

#include "tessera/base/error.hpp"

namespace tessera::text {
namespace {

constexpr std::size_t kHeaderCrcOffset = 44;

void put_le(std::byte* at, std::uint64_t value, std::size_t bytes) {
  for (std::size_t i = 0; i < bytes; ++i) at[i] = static_cast<std::byte>(value >> (8 * i));
}

std::uint64_t get_le(const std::byte* at, std::size_t bytes) {
  std::uint64_t value = 0;
  for (std::size_t i = 0; i < bytes; ++i) value |= std::to_integer<std::uint64_t>(at[i]) << (8 * i);
  return value;
}

[[noreturn]] void refuse(const std::filesystem::path& file, const std::string& what) {
  throw DataError(file.string() + ": " + what + "; " + prepare_hint(file));
}

}  // namespace

std::string prepare_hint(const std::filesystem::path& file) {
  return "write it with `tessera data prepare --output " + file.string() + "`";
}

std::uint32_t crc32_of(std::span<const std::byte> bytes, std::uint32_t crc) {
  // zlib takes an unsigned length; a corpus may exceed it.
  constexpr std::size_t kChunk = std::size_t{1} << 30;
  for (std::size_t done = 0; done < bytes.size(); done += kChunk) {
    const std::size_t n = std::min(kChunk, bytes.size() - done);
    crc = static_cast<std::uint32_t>(
        ::crc32(crc, reinterpret_cast<const Bytef*>(bytes.data() + done), static_cast<uInt>(n)));
  }
  return crc;
}

std::array<std::byte, kTokenFileHeaderBytes> encode_token_file_header(
    const TokenFileHeader& header) {
  std::array<std::byte, kTokenFileHeaderBytes> bytes{};
  std::memcpy(bytes.data(), kTokenFileMagic.data(), kTokenFileMagic.size());
  put_le(bytes.data() + 8, kTokenFileVersion, 4);
  put_le(bytes.data() + 12, kByteVocabulary, 4);
  put_le(bytes.data() + 16, 1, 4);
  put_le(bytes.data() + 24, header.token_count, 8);
  put_le(bytes.data() + 32, header.split, 8);
  put_le(bytes.data() + 40, header.token_crc, 4);
  put_le(bytes.data() + kHeaderCrcOffset,
         crc32_of(std::span<const std::byte>(bytes.data(), kHeaderCrcOffset)), 4);
  return bytes;
}

TokenFileHeader parse_token_file_header(std::span<const std::byte> bytes, std::uint64_t file_bytes,
                                        const std::filesystem::path& file) {
  if (bytes.size() < kTokenFileHeaderBytes || file_bytes < kTokenFileHeaderBytes) {
    refuse(file, "truncated: " + std::to_string(std::min<std::uint64_t>(bytes.size(), file_bytes)) +
                     " bytes, shorter than the " + std::to_string(kTokenFileHeaderBytes) +
                     "-byte header of a token file");
  }
  if (std::memcmp(bytes.data(), kTokenFileMagic.data(), kTokenFileMagic.size()) != 0) {
    refuse(file, "not a tessera token file (its first 8 bytes are not \"TSRTOKNS\")");
  }
  const auto version = get_le(bytes.data() + 8, 4);
  if (version != kTokenFileVersion) {
    refuse(file, "token file format version " + std::to_string(version) + ", this tessera reads " +
                     std::to_string(kTokenFileVersion));
  }
  const auto header_crc = get_le(bytes.data() + kHeaderCrcOffset, 4);
  if (header_crc != crc32_of(bytes.first(kHeaderCrcOffset))) {
    refuse(file, "header checksum mismatch (the header is damaged)");
  }
  const auto vocabulary = get_le(bytes.data() + 12, 4);
  const auto token_bytes = get_le(bytes.data() + 16, 4);
  if (vocabulary != kByteVocabulary || token_bytes != 1) {
    refuse(file, "vocabulary of " + std::to_string(vocabulary) + " tokens of " +
                     std::to_string(token_bytes) + " byte(s); this tessera reads byte tokens (" +
                     std::to_string(kByteVocabulary) + ", 1 byte)");
  }
  if (get_le(bytes.data() + 20, 4) != 0) refuse(file, "reserved header field is not 0");
  TokenFileHeader header;
  header.token_count = get_le(bytes.data() + 24, 8);
  header.split = get_le(bytes.data() + 32, 8);
  header.token_crc = static_cast<std::uint32_t>(get_le(bytes.data() + 40, 4));
  if (header.split > header.token_count) {
    refuse(file, "split point " + std::to_string(header.split) + " lies past the " +
                     std::to_string(header.token_count) + " tokens");
  }
  const std::uint64_t payload = file_bytes - kTokenFileHeaderBytes;
  if (payload != header.token_count) {
    refuse(file, std::string(payload < header.token_count ? "truncated" : "trailing bytes") +
                     ": the header counts " + std::to_string(header.token_count) +
                     " tokens, the file holds " + std::to_string(payload));
  }
  return header;
}

MappedTokenFile::MappedTokenFile(const std::filesystem::path& file) {
  const int fd = ::open(file.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    const int error = errno;
    refuse(file, error == ENOENT ? std::string("file not found")
                                 : std::string("cannot open: ") + std::strerror(error));
  }
  struct stat info {};
  const bool stat_ok = ::fstat(fd, &info) == 0;
  const int stat_error = errno;
  if (!stat_ok || !S_ISREG(info.st_mode)) {
    ::close(fd);
    refuse(file, stat_ok ? "not a regular file"
                         : std::string("cannot stat: ") + std::strerror(stat_error));
  }
  const auto file_bytes = static_cast<std::uint64_t>(info.st_size);
  if (file_bytes > 0) {
    mapping_ = ::mmap(nullptr, file_bytes, PROT_READ, MAP_SHARED, fd, 0);
    if (mapping_ == MAP_FAILED) {
      const int error = errno;
      mapping_ = nullptr;
      ::close(fd);
      throw DataError(file.string() + ": cannot map " + std::to_string(file_bytes) +
                      " bytes: " + std::strerror(error));
    }
    mapping_bytes_ = file_bytes;
  }
  ::close(fd);  // the mapping keeps the file
  try {
    const std::span<const std::byte> bytes(static_cast<const std::byte*>(mapping_), mapping_bytes_);
    header_ = parse_token_file_header(bytes, file_bytes, file);
    if (crc32_of(bytes.subspan(kTokenFileHeaderBytes)) != header_.token_crc) {
      refuse(file, "token checksum mismatch (the tokens are damaged)");
    }
  } catch (...) {
    unmap();
    throw;
  }
}

MappedTokenFile::~MappedTokenFile() {
  unmap();
}

MappedTokenFile::MappedTokenFile(MappedTokenFile&& other) noexcept
    : mapping_(std::exchange(other.mapping_, nullptr)),
      mapping_bytes_(std::exchange(other.mapping_bytes_, 0)),
      header_(other.header_) {}

MappedTokenFile& MappedTokenFile::operator=(MappedTokenFile&& other) noexcept {
  if (this != &other) {
    unmap();
    mapping_ = std::exchange(other.mapping_, nullptr);
    mapping_bytes_ = std::exchange(other.mapping_bytes_, 0);
    header_ = other.header_;
  }
  return *this;
}

void MappedTokenFile::unmap() noexcept {
  if (mapping_ != nullptr) ::munmap(mapping_, mapping_bytes_);
  mapping_ = nullptr;
  mapping_bytes_ = 0;
}

std::span<const std::uint8_t> MappedTokenFile::tokens() const noexcept {
  if (mapping_ == nullptr) return {};
  return {static_cast<const std::uint8_t*>(mapping_) + kTokenFileHeaderBytes,
          static_cast<std::size_t>(header_.token_count)};
}

}  // namespace tessera::text
