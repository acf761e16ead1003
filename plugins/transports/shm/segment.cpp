#include "segment.hpp"

#include <fcntl.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <new>
#include <random>
#include <system_error>
#include <utility>

#include "tessera/base/error.hpp"

namespace tessera::shm {

namespace {

constexpr std::uint64_t kMagic = 0x3130'6d68'732d'7374;  // "ts-shm01"
constexpr std::uint32_t kVersion = 2;                    // 2: RankSlot::heartbeat

constexpr std::size_t round_up(std::size_t n, std::size_t to) {
  return (n + to - 1) / to * to;
}

[[noreturn]] void throw_errno(const std::string& what) {
  throw TransportError("shm: " + what + ": " + std::strerror(errno), std::nullopt, "connect");
}

std::size_t channel_stride(std::size_t channel_bytes) {
  return round_up(sizeof(ChunkHeader) + channel_bytes, kPage);
}

// A SIGKILLed rank 0 cannot unlink a segment it created moments before; the next creator on
// this host removes it, recognising it by the pid in its name.
void remove_segments_of_dead_processes() noexcept {
  std::error_code ec;
  for (const auto& entry : std::filesystem::directory_iterator("/dev/shm", ec)) {
    const std::string name = entry.path().filename().string();
    if (name.rfind(kSegmentPrefix, 0) != 0) continue;
    const std::string rest = name.substr(std::strlen(kSegmentPrefix));
    const auto dash = rest.find('-');
    if (dash == std::string::npos) continue;
    char* end = nullptr;
    const long pid = std::strtol(rest.c_str(), &end, 10);
    if (end != rest.c_str() + dash || pid <= 0) continue;
    if (::kill(static_cast<pid_t>(pid), 0) == -1 && errno == ESRCH)
      ::shm_unlink(("/" + name).c_str());
  }
}

std::string unique_name() {
  std::random_device device;
  const std::uint64_t random = (std::uint64_t{device()} << 32) ^ device();
  char hex[17];
  std::snprintf(hex, sizeof hex, "%016llx", static_cast<unsigned long long>(random));
  return "/" + std::string(kSegmentPrefix) + std::to_string(::getpid()) + "-" + hex;
}

}  // namespace

void Segment::compute_offsets() {
  slots_offset_ = round_up(sizeof(Header), kCacheLine);
  const auto n = static_cast<std::size_t>(size_);
  channels_offset_ = slots_offset_ + n * sizeof(RankSlot);
  staging_offset_ = round_up(channels_offset_ + n * n * sizeof(ChannelControl), kPage);
  channel_data_offset_ = staging_offset_ + n * 2 * staging_bytes_;
  bytes_ = channel_data_offset_ + n * n * 2 * channel_stride(channel_bytes_);
}

namespace {

std::string format_bytes(long double bytes) {
  const char* units[] = {"B", "KiB", "MiB", "GiB", "TiB", "PiB", "EiB"};
  int unit = 0;
  while (bytes >= 1024 && unit < 6) {
    bytes /= 1024;
    ++unit;
  }
  char text[64];
  std::snprintf(text, sizeof text, unit == 0 ? "%.0Lf %s" : "%.1Lf %s", bytes, units[unit]);
  return text;
}

}  // namespace

void Segment::require_room(int size, std::size_t staging_bytes, std::size_t channel_bytes) {
  struct statvfs fs {};
  if (::statvfs("/dev/shm", &fs) != 0) return;
  const long double free_bytes =
      static_cast<long double>(fs.f_bavail) * static_cast<long double>(fs.f_frsize);
  // In long double: for absurd worlds the exact size would not fit in 64 bits.
  const auto n = static_cast<long double>(size);
  const long double staging = n * 2 * static_cast<long double>(round_up(staging_bytes, kPage));
  const long double channels = n * n * 2 * static_cast<long double>(channel_stride(channel_bytes));
  const long double control =
      static_cast<long double>(round_up(sizeof(Header), kCacheLine) + kPage) +
      n * static_cast<long double>(sizeof(RankSlot)) +
      n * n * static_cast<long double>(sizeof(ChannelControl));
  const long double needed = control + staging + channels;
  if (needed <= free_bytes) return;
  throw TransportError(
      "shm: a world of " + std::to_string(size) + " ranks needs a shared-memory segment of " +
          format_bytes(needed) + " (staging " + std::to_string(size) + " x 2 x " +
          format_bytes(static_cast<long double>(round_up(staging_bytes, kPage))) +
          " from chunk_size, point-to-point channels " + std::to_string(size) + " x " +
          std::to_string(size) + " x 2 x " +
          format_bytes(static_cast<long double>(channel_stride(channel_bytes))) +
          " from p2p_chunk_size), but /dev/shm has only " + format_bytes(free_bytes) +
          " free; enlarge /dev/shm (docker run --shm-size=...), lower [transport.shm] "
          "chunk_size or p2p_chunk_size, or use fewer ranks or the ucx transport",
      std::nullopt, "connect");
}

Segment Segment::create(int size, std::size_t staging_bytes, std::size_t channel_bytes) {
  remove_segments_of_dead_processes();
  Segment segment;
  segment.size_ = size;
  segment.staging_bytes_ = round_up(staging_bytes, kPage);
  segment.channel_bytes_ = channel_bytes;
  segment.compute_offsets();
  segment.name_ = unique_name();
  const int fd = ::shm_open(segment.name_.c_str(), O_CREAT | O_EXCL | O_RDWR, 0600);
  if (fd == -1) throw_errno("cannot create " + segment.name_);
  segment.owns_name_ = true;
  if (::ftruncate(fd, static_cast<off_t>(segment.bytes_)) == -1) {
    ::close(fd);
    throw_errno("cannot size " + segment.name_ + " to " + std::to_string(segment.bytes_) +
                " bytes");
  }
  segment.map(fd, segment.bytes_);

  auto* header = new (segment.base_) Header{};
  header->magic = kMagic;
  header->version = kVersion;
  header->size = size;
  header->staging_bytes = segment.staging_bytes_;
  header->channel_bytes = channel_bytes;
  header->total_bytes = segment.bytes_;
  header->failed_rank = -1;
  for (int r = 0; r < size; ++r) new (&segment.rank_slot(r)) RankSlot{};
  for (int s = 0; s < size; ++s)
    for (int d = 0; d < size; ++d) new (&segment.channel(s, d)) ChannelControl{};
  return segment;
}

Segment Segment::open(const std::string& name, int size) {
  Segment segment;
  segment.name_ = name;
  const int fd = ::shm_open(name.c_str(), O_RDWR, 0);
  if (fd == -1) throw_errno("cannot open segment " + name);
  struct stat st {};
  if (::fstat(fd, &st) == -1) {
    ::close(fd);
    throw_errno("cannot stat " + name);
  }
  segment.map(fd, static_cast<std::size_t>(st.st_size));
  const Header& header = segment.header();
  if (segment.bytes_ < sizeof(Header) || header.magic != kMagic || header.version != kVersion ||
      header.size != size || header.total_bytes != segment.bytes_) {
    throw TransportError("shm: segment " + name + " does not match this build or world size " +
                             std::to_string(size) + " (stale store key?)",
                         std::nullopt, "connect");
  }
  segment.size_ = size;
  segment.staging_bytes_ = header.staging_bytes;
  segment.channel_bytes_ = header.channel_bytes;
  segment.compute_offsets();
  return segment;
}

void Segment::map(int fd, std::size_t bytes) {
  void* base = ::mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  const int saved = errno;
  ::close(fd);
  errno = saved;
  if (base == MAP_FAILED) throw_errno("cannot map " + name_);
  base_ = base;
  bytes_ = bytes;
}

Segment::Segment(Segment&& other) noexcept {
  *this = std::move(other);
}

Segment& Segment::operator=(Segment&& other) noexcept {
  if (this == &other) return *this;
  release();
  name_ = std::move(other.name_);
  owns_name_ = std::exchange(other.owns_name_, false);
  base_ = std::exchange(other.base_, nullptr);
  bytes_ = std::exchange(other.bytes_, 0);
  size_ = other.size_;
  staging_bytes_ = other.staging_bytes_;
  channel_bytes_ = other.channel_bytes_;
  slots_offset_ = other.slots_offset_;
  channels_offset_ = other.channels_offset_;
  staging_offset_ = other.staging_offset_;
  channel_data_offset_ = other.channel_data_offset_;
  return *this;
}

Segment::~Segment() {
  release();
}

void Segment::release() noexcept {
  if (owns_name_) unlink();
  if (base_ != nullptr) ::munmap(base_, bytes_);
  base_ = nullptr;
}

void Segment::unlink() noexcept {
  if (!name_.empty()) ::shm_unlink(name_.c_str());  // ENOENT: another rank was first
  owns_name_ = false;
}

RankSlot& Segment::rank_slot(int rank) const noexcept {
  return *reinterpret_cast<RankSlot*>(static_cast<std::byte*>(base_) + slots_offset_ +
                                      static_cast<std::size_t>(rank) * sizeof(RankSlot));
}

ChannelControl& Segment::channel(int src, int dst) const noexcept {
  const auto index = static_cast<std::size_t>(src * size_ + dst);
  return *reinterpret_cast<ChannelControl*>(static_cast<std::byte*>(base_) + channels_offset_ +
                                            index * sizeof(ChannelControl));
}

std::byte* Segment::staging(int rank, std::uint64_t buffer) const noexcept {
  const auto index = static_cast<std::size_t>(rank) * 2 + static_cast<std::size_t>(buffer % 2);
  return static_cast<std::byte*>(base_) + staging_offset_ + index * staging_bytes_;
}

std::byte* Segment::channel_slot(int src, int dst, std::uint64_t slot) const noexcept {
  const auto index =
      static_cast<std::size_t>(src * size_ + dst) * 2 + static_cast<std::size_t>(slot % 2);
  return static_cast<std::byte*>(base_) + channel_data_offset_ +
         index * channel_stride(channel_bytes_);
}

}  // namespace tessera::shm
