#include "durable_file.hpp"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <fstream>
#include <string>

#include "tessera/base/error.hpp"

namespace tessera::checkpoint {

namespace {

[[noreturn]] void fail(std::string_view role, const std::string& what,
                       const std::filesystem::path& path) {
  throw CheckpointError(std::string(role) + ": " + what + " " + path.string() + ": " +
                        std::strerror(errno));
}

class FileDescriptor {
 public:
  explicit FileDescriptor(int fd) : fd_(fd) {}
  ~FileDescriptor() {
    if (fd_ >= 0) ::close(fd_);
  }
  FileDescriptor(const FileDescriptor&) = delete;
  FileDescriptor& operator=(const FileDescriptor&) = delete;
  [[nodiscard]] int get() const noexcept { return fd_; }
  // close() reports delayed write errors (NFS), so a commit must check it.
  [[nodiscard]] int release_and_close() noexcept {
    const int rc = ::close(fd_);
    fd_ = -1;
    return rc;
  }

 private:
  int fd_;
};

}  // namespace

void write_file_synced(const std::filesystem::path& path, std::span<const std::byte> bytes,
                       std::string_view role) {
  FileDescriptor fd(::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644));
  if (fd.get() < 0) fail(role, "cannot create", path);
  const std::byte* p = bytes.data();
  std::size_t left = bytes.size();
  while (left > 0) {
    const ssize_t n = ::write(fd.get(), p, left);
    if (n < 0) {
      if (errno == EINTR) continue;
      fail(role, "cannot write", path);
    }
    p += n;
    left -= static_cast<std::size_t>(n);
  }
  if (::fsync(fd.get()) != 0) fail(role, "cannot fsync", path);
  if (fd.release_and_close() != 0) fail(role, "cannot close", path);
}

void write_file_synced(const std::filesystem::path& path, std::string_view text,
                       std::string_view role) {
  write_file_synced(path, std::as_bytes(std::span<const char>(text.data(), text.size())), role);
}

void sync_directory(const std::filesystem::path& dir, std::string_view role) {
  FileDescriptor fd(::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
  if (fd.get() < 0) fail(role, "cannot open folder", dir);
  if (::fsync(fd.get()) != 0) fail(role, "cannot fsync folder", dir);
}

void replace_file_atomically(const std::filesystem::path& path, std::string_view text,
                             std::string_view role) {
  auto temporary = path;
  temporary += ".tmp";
  try {
    write_file_synced(temporary, text, role);
  } catch (const CheckpointError&) {
    std::error_code ignored;  // a half-written temporary helps nobody
    std::filesystem::remove(temporary, ignored);
    throw;
  }
  if (::rename(temporary.c_str(), path.c_str()) != 0) fail(role, "cannot rename into", path);
  sync_directory(path.parent_path().empty() ? std::filesystem::path(".") : path.parent_path(),
                 role);
}

std::vector<std::byte> read_file(const std::filesystem::path& path) {
  std::ifstream in(path, std::ios::binary | std::ios::ate);
  if (!in) fail("checkpoint", "cannot open", path);
  const auto size = static_cast<std::size_t>(in.tellg());
  std::vector<std::byte> bytes(size);
  in.seekg(0);
  if (size > 0 &&
      !in.read(reinterpret_cast<char*>(bytes.data()), static_cast<std::streamsize>(size))) {
    fail("checkpoint", "cannot read", path);
  }
  return bytes;
}

}  // namespace tessera::checkpoint
