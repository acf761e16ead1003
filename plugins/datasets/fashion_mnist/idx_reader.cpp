#include "fashion_mnist/idx_reader.hpp"

#include <zlib.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <memory>
#include <string>
#include <system_error>

#include "tessera/base/error.hpp"

namespace tessera::fashion_mnist {
namespace {

struct GzCloser {
  void operator()(gzFile_s* f) const noexcept { gzclose(f); }
};
using GzFile = std::unique_ptr<gzFile_s, GzCloser>;

std::string hex(std::uint32_t value) {
  char text[16];
  std::snprintf(text, sizeof text, "0x%08x", value);
  return text;
}

// Reads up to n bytes; returns how many arrived (fewer only at the end of the data).
std::size_t read_some(gzFile_s* f, const std::filesystem::path& file, std::uint8_t* out,
                      std::size_t n) {
  std::size_t done = 0;
  while (done < n) {
    constexpr std::size_t kChunk = 1U << 30;  // gzread takes an unsigned count
    const auto want = static_cast<unsigned>(std::min(n - done, kChunk));
    const int got = gzread(f, out + done, want);
    if (got < 0) {
      int code = 0;
      const char* message = gzerror(f, &code);
      if (code == Z_BUF_ERROR) {
        throw DataError(file.string() + ": truncated: the gzip stream ends early");
      }
      throw DataError(file.string() + ": cannot decompress: " + message);
    }
    if (got == 0) break;
    done += static_cast<std::size_t>(got);
  }
  return done;
}

// Says what is in the way when `file` is not a readable regular file: missing, a folder, a
// symlink loop or dangling link, a device, or a path through something that is not a folder.
void check_regular_file(const std::filesystem::path& file) {
  namespace fs = std::filesystem;
  std::error_code ec;
  const fs::file_status status = fs::status(file, ec);  // follows symlinks
  if (ec && ec != std::errc::no_such_file_or_directory) {
    const std::string why = ec == std::errc::too_many_symbolic_link_levels
                                ? "a symbolic link loop (" + ec.message() + ")"
                                : ec.message();
    throw DataError(file.string() + ": cannot be read: " + why);
  }
  switch (status.type()) {
    case fs::file_type::regular: return;
    case fs::file_type::not_found: {
      std::error_code link_ec;
      if (fs::is_symlink(fs::symlink_status(file, link_ec))) {
        throw DataError(file.string() + ": a symbolic link to " +
                        fs::read_symlink(file, link_ec).string() + ", which does not exist");
      }
      throw DataError(file.string() + ": file not found");
    }
    case fs::file_type::directory:
      throw DataError(file.string() + ": is a folder, not a gzip'ed IDX file");
    default:
      throw DataError(file.string() +
                      ": is not a regular file (a device, FIFO or socket), not a gzip'ed IDX file");
  }
}

}  // namespace

IdxArray read_idx_ubyte(const std::filesystem::path& file, std::size_t expected_rank) {
  check_regular_file(file);
  errno = 0;
  GzFile f(gzopen(file.c_str(), "rb"));
  if (!f) {
    throw DataError(file.string() +
                    ": cannot open: " + (errno != 0 ? std::strerror(errno) : "out of memory"));
  }

  std::uint8_t header[4];
  if (read_some(f.get(), file, header, 4) != 4) {
    throw DataError(file.string() + ": truncated: no IDX header");
  }
  const std::uint32_t magic = (std::uint32_t{header[0]} << 24) | (std::uint32_t{header[1]} << 16) |
                              (std::uint32_t{header[2]} << 8) | header[3];
  const std::uint32_t expected_magic = 0x0800U | static_cast<std::uint32_t>(expected_rank);
  if (magic != expected_magic) {
    throw DataError(file.string() + ": bad magic number " + hex(magic) + ", expected " +
                    hex(expected_magic) + " (unsigned bytes, " + std::to_string(expected_rank) +
                    " dimensions)");
  }
  IdxArray array;
  std::size_t total = 1;
  for (std::size_t d = 0; d < expected_rank; ++d) {
    std::uint8_t b[4];
    if (read_some(f.get(), file, b, 4) != 4) {
      throw DataError(file.string() + ": truncated: header ends inside dimension " +
                      std::to_string(d));
    }
    const std::uint32_t dim = (std::uint32_t{b[0]} << 24) | (std::uint32_t{b[1]} << 16) |
                              (std::uint32_t{b[2]} << 8) | b[3];
    array.dims.push_back(dim);
    constexpr std::size_t kLimit = std::size_t{1} << 34;  // 16 GiB: a corrupt header, not data
    if (__builtin_mul_overflow(total, std::size_t{dim}, &total) || total > kLimit) {
      std::string shape;
      for (const auto extent : array.dims)
        shape += (shape.empty() ? "" : " x ") + std::to_string(extent);
      throw DataError(file.string() + ": header promises " + shape +
                      " bytes, more than any IDX data set (corrupt header)");
    }
  }
  // The buffer grows with the data that really arrives, so a header that promises gigabytes
  // in a small file costs no more than the file.
  constexpr std::size_t kGrowBytes = std::size_t{1} << 20;
  std::size_t got = 0;
  while (got < total) {
    const std::size_t want = std::min(total - got, kGrowBytes);
    array.data.resize(got + want);
    const std::size_t arrived = read_some(f.get(), file, array.data.data() + got, want);
    got += arrived;
    if (arrived < want) break;
  }
  if (got != total) {
    throw DataError(file.string() + ": truncated: header promises " + std::to_string(total) +
                    " data bytes, file holds " + std::to_string(got));
  }
  std::uint8_t extra = 0;
  if (read_some(f.get(), file, &extra, 1) != 0) {
    throw DataError(file.string() + ": trailing bytes after the " + std::to_string(total) +
                    " data bytes its header promises");
  }
  return array;
}

}  // namespace tessera::fashion_mnist
