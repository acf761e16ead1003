#include "text/token_file_writer.hpp"

#include <fcntl.h>
#include <unistd.h>

#include <array>
#include <cerrno>
#include <cstring>
#include <string>
#include <utility>

#include "tessera/base/error.hpp"

namespace tessera::text {
namespace {

[[noreturn]] void fail(const std::string& what, const std::filesystem::path& file) {
  throw DataError(file.string() + ": cannot " + what + ": " + std::strerror(errno));
}

}  // namespace

TokenFileWriter::TokenFileWriter(std::filesystem::path target) : target_(std::move(target)) {
  temporary_ = target_;
  temporary_ += ".tmp-" + std::to_string(::getpid());
  fd_ = ::open(temporary_.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd_ < 0) fail("create", temporary_);
  try {
    // Room for the header, written by commit() once the count and checksum are known.
    const std::array<std::byte, kTokenFileHeaderBytes> placeholder{};
    write_at(placeholder, 0);
  } catch (...) {
    ::close(fd_);
    std::error_code ignored;
    std::filesystem::remove(temporary_, ignored);
    throw;
  }
}

TokenFileWriter::~TokenFileWriter() {
  if (fd_ >= 0) {
    ::close(fd_);
    std::error_code ignored;  // a half-written temporary helps nobody
    std::filesystem::remove(temporary_, ignored);
  }
}

void TokenFileWriter::write_at(std::span<const std::byte> bytes, std::uint64_t offset) {
  while (!bytes.empty()) {
    const ssize_t n = ::pwrite(fd_, bytes.data(), bytes.size(), static_cast<off_t>(offset));
    if (n < 0) {
      if (errno == EINTR) continue;
      fail("write", temporary_);
    }
    bytes = bytes.subspan(static_cast<std::size_t>(n));
    offset += static_cast<std::uint64_t>(n);
  }
}

void TokenFileWriter::append(std::span<const std::byte> tokens) {
  write_at(tokens, kTokenFileHeaderBytes + header_.token_count);
  header_.token_crc = crc32_of(tokens, header_.token_crc);
  header_.token_count += tokens.size();
}

TokenFileHeader TokenFileWriter::commit(std::uint64_t split) {
  if (split > header_.token_count) {
    throw DataError(target_.string() + ": split point " + std::to_string(split) +
                    " lies past the " + std::to_string(header_.token_count) + " tokens written");
  }
  header_.split = split;
  write_at(encode_token_file_header(header_), 0);
  if (::fsync(fd_) != 0) fail("fsync", temporary_);
  // close() reports delayed write errors (NFS), so a commit must check it.
  const int closed = ::close(std::exchange(fd_, -1));
  if (closed != 0) {
    const int error = errno;
    std::error_code ignored;
    std::filesystem::remove(temporary_, ignored);
    errno = error;
    fail("close", temporary_);
  }
  if (::rename(temporary_.c_str(), target_.c_str()) != 0) {
    const int error = errno;
    std::error_code ignored;
    std::filesystem::remove(temporary_, ignored);
    errno = error;
    fail("rename the temporary onto", target_);
  }
  // The rename is durable only once the folder that holds the name is synced.
  const auto folder =
      target_.parent_path().empty() ? std::filesystem::path(".") : target_.parent_path();
  const int folder_fd = ::open(folder.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (folder_fd < 0) fail("open the folder", folder);
  const int synced = ::fsync(folder_fd);
  ::close(folder_fd);
  if (synced != 0) fail("fsync the folder", folder);
  return header_;
}

}  // namespace tessera::text
