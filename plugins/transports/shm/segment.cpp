#include "segment.hpp"

#include <fcntl.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <new>
#include <optional>
#include <random>
#include <system_error>
#include <utility>

#include "futex.hpp"
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

// The room /dev/shm has left, or nullopt where it cannot be told: statvfs fails, or the tmpfs
// has no size limit (it then reports 0 blocks in all).
std::optional<long double> free_in_dev_shm() {
  struct statvfs fs {};
  if (::statvfs("/dev/shm", &fs) != 0 || fs.f_blocks == 0) return std::nullopt;
  return static_cast<long double>(fs.f_bavail) * static_cast<long double>(fs.f_frsize);
}

// The size compute_offsets() gives, in long double: for absurd worlds it would not fit in 64
// bits.
long double segment_bytes(int size, std::size_t staging_bytes, std::size_t channel_bytes) {
  const auto n = static_cast<long double>(size);
  const auto page = static_cast<long double>(kPage);
  const long double control =
      std::ceil((static_cast<long double>(round_up(sizeof(Header), kCacheLine)) +
                 n * static_cast<long double>(sizeof(RankSlot)) +
                 n * n * static_cast<long double>(sizeof(ChannelControl))) /
                page) *
      page;
  return control + n * 2 * static_cast<long double>(round_up(staging_bytes, kPage)) +
         n * n * 2 * static_cast<long double>(channel_stride(channel_bytes));
}

// What a world's segment needs, why /dev/shm cannot hold it (`refusal`) and what to do about
// it (`remedy` first where the refusal has a cause of its own).
[[noreturn]] void throw_no_room(int size, std::size_t staging_bytes, std::size_t channel_bytes,
                                const std::string& refusal, const std::string& remedy = "") {
  const long double needed = segment_bytes(size, staging_bytes, channel_bytes);
  char exact[64];
  std::snprintf(exact, sizeof exact, "%.0Lf", needed);
  // Not a TransportError: no peer failed, and every world of this size would be refused alike
  // (an elastic job must not take it for a rank's failure and regroup into the same refusal).
  throw OutOfMemory(
      "shm: a world of " + std::to_string(size) + " ranks needs a shared-memory segment of " +
      format_bytes(needed) + " (" + exact + " bytes: staging " + std::to_string(size) + " x 2 x " +
      format_bytes(static_cast<long double>(round_up(staging_bytes, kPage))) +
      " from chunk_size, point-to-point channels " + std::to_string(size) + " x " +
      std::to_string(size) + " x 2 x " +
      format_bytes(static_cast<long double>(channel_stride(channel_bytes))) +
      " from p2p_chunk_size), but " + refusal + "; " + remedy +
      "free space in /dev/shm (remove what no longer runs there), mount it larger "
      "(docker run --shm-size=..., mount -o remount,size=... /dev/shm), lower "
      "[transport.shm] chunk_size or p2p_chunk_size, or use fewer ranks or the ucx transport");
}

// Allocates every page of the object now. tmpfs otherwise grants a page only when it is first
// touched, and a page it cannot grant then (/dev/shm filled meanwhile) ends the process with
// SIGBUS in the middle of a collective. In steps, so that a signal (EINTR: tmpfs gives back
// what the interrupted call had allocated) costs one step's work, not all of it. Returns 0 or
// the error number.
int reserve_pages(int fd, std::size_t bytes) noexcept {
  constexpr std::size_t kStep = std::size_t{64} << 20;
  for (std::size_t offset = 0; offset < bytes; offset += kStep) {
    const std::size_t length = std::min(kStep, bytes - offset);
    int rc = 0;
    do {
      rc = ::posix_fallocate(fd, static_cast<off_t>(offset), static_cast<off_t>(length));
    } while (rc == EINTR);
    if (rc != 0) return rc;
  }
  return 0;
}

}  // namespace

void Segment::require_room(int size, std::size_t staging_bytes, std::size_t channel_bytes) {
  const auto free_bytes = free_in_dev_shm();
  if (!free_bytes || segment_bytes(size, staging_bytes, channel_bytes) <= *free_bytes) return;
  throw_no_room(size, staging_bytes, channel_bytes,
                "/dev/shm has only " + format_bytes(*free_bytes) + " free");
}

Segment Segment::create(int size, std::size_t staging_bytes, std::size_t channel_bytes) {
  remove_segments_of_dead_processes();
  // Refuses an impossible size without first taking, for a moment, all that is left.
  require_room(size, staging_bytes, channel_bytes);
  Segment segment;
  segment.size_ = size;
  segment.staging_bytes_ = round_up(staging_bytes, kPage);
  segment.channel_bytes_ = channel_bytes;
  segment.compute_offsets();
  segment.name_ = unique_name();
  const int fd = ::shm_open(segment.name_.c_str(), O_CREAT | O_EXCL | O_RDWR, 0600);
  if (fd == -1) throw_errno("cannot create " + segment.name_);
  segment.owns_name_ = true;
  if (const int rc = reserve_pages(fd, segment.bytes_); rc != 0) {
    // Nothing of it may stay behind: the name goes now, the pages with the descriptor.
    ::close(fd);
    segment.unlink();
    const auto free_bytes = free_in_dev_shm();
    const std::string free_text = free_bytes ? format_bytes(*free_bytes) : "an unknown amount";
    if (rc == ENOSPC)
      throw_no_room(size, staging_bytes, channel_bytes, "/dev/shm has only " + free_text + " free");
    if (rc == ENOMEM)
      throw_no_room(size, staging_bytes, channel_bytes,
                    "/dev/shm has " + free_text +
                        " free and this process's memory limit (its cgroup's memory.max) refused "
                        "the pages",
                    "raise that limit, ");
    if (rc == EFBIG)
      throw_no_room(size, staging_bytes, channel_bytes,
                    "/dev/shm has " + free_text +
                        " free and this process may not create a file that large (ulimit -f)",
                    "raise that limit, ");
    errno = rc;
    throw_errno("cannot reserve " + std::to_string(segment.bytes_) + " bytes in /dev/shm for " +
                segment.name_);
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

Segment Segment::open(const std::string& name, int rank, int size) {
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
  const bool this_build = segment.bytes_ >= sizeof(Header) && header.magic == kMagic &&
                          header.version == kVersion && header.total_bytes == segment.bytes_;
  if (this_build && header.size != size) {
    // The ranks already attached wait for this one: tell them it will not come.
    const std::string reason = "rank " + std::to_string(rank) + " (pid " +
                               std::to_string(::getpid()) + ") expects a world of " +
                               std::to_string(size) + " ranks, not the " +
                               std::to_string(header.size) +
                               " this one was created for: start every rank with one world size";
    segment.record_failure(FailureKind::aborted, rank, reason);
    throw TransportError("shm: " + reason, std::nullopt, "connect");
  }
  if (!this_build) {
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

void Segment::record_failure(FailureKind kind, int rank, const std::string& reason) const noexcept {
  Header& header = this->header();
  std::uint32_t expected = static_cast<std::uint32_t>(FailureKind::none);
  if (header.failure.compare_exchange_strong(expected,
                                             static_cast<std::uint32_t>(FailureKind::claimed))) {
    header.failed_rank = rank;
    const auto n = std::min(reason.size(), sizeof(header.failure_reason) - 1);
    std::memcpy(header.failure_reason, reason.data(), n);
    header.failure_reason[n] = '\0';
    header.failure.store(static_cast<std::uint32_t>(kind), std::memory_order_release);
  }
  header.epoch.fetch_add(1);
  futex_wake_all(header.epoch);
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
