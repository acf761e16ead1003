#include "snapshot_area.hpp"

#include <fcntl.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <charconv>
#include <cstring>
#include <filesystem>
#include <random>
#include <string_view>

#include "tessera/base/error.hpp"

namespace tessera::elastic {

namespace {

constexpr std::uint64_t kMagic = 0x54455353'52455031ULL;  // "TESSREP1"
constexpr std::size_t kPage = 4096;
constexpr std::string_view kPrefix = "tessera-replica-";

struct Header {
  std::uint64_t magic;
  std::uint64_t slots;
};

// One slot's description. `sequence` is odd while the owner writes the slot, even otherwise;
// 0: never published.
struct alignas(64) Entry {
  std::uint64_t sequence;
  std::int64_t step;
  std::int64_t epoch;
  std::int64_t samples;
  std::int64_t world_size;
  std::uint64_t offset;
  std::uint64_t capacity;
  std::uint64_t length;
};

std::size_t round_up(std::size_t bytes) {
  return (bytes + kPage - 1) / kPage * kPage;
}

std::size_t data_start(std::size_t slots) {
  return round_up(sizeof(Header) + slots * sizeof(Entry));
}

Entry* entries(std::uint8_t* base) {
  return reinterpret_cast<Entry*>(base + sizeof(Header));
}

std::uint64_t load(const std::uint64_t& word) {
  return __atomic_load_n(&word, __ATOMIC_ACQUIRE);
}

void store(std::uint64_t& word, std::uint64_t value) {
  __atomic_store_n(&word, value, __ATOMIC_RELEASE);
}

std::string errno_text() {
  return std::strerror(errno);
}

// This process's pid namespace (the inode of /proc/self/ns/pid), 0 where it cannot be read:
// names carry it, so that a sweep judges only pids it can see (/dev/shm may be shared by
// processes of several pid namespaces, as containers on one host are).
std::uint64_t this_pid_namespace() {
  char link[64] = {};
  const ssize_t n = ::readlink("/proc/self/ns/pid", link, sizeof link - 1);
  const std::string_view text(link, n > 0 ? static_cast<std::size_t>(n) : 0);  // "pid:[4026531836]"
  const auto open = text.find('[');
  std::uint64_t inode = 0;
  if (open != std::string_view::npos) {
    std::from_chars(text.data() + open + 1, text.data() + text.size(), inode);
  }
  return inode & 0x7fffffffffffffffULL;  // as names carry it, a non-negative int64
}

// Removes the areas whose creating process is gone: one killed between creating its area and
// the others' opening it left its name behind. Only names of this pid namespace are judged.
void remove_orphans() {
  const std::string mine = std::string(kPrefix) + std::to_string(this_pid_namespace()) + "-";
  std::error_code error;
  for (const auto& entry : std::filesystem::directory_iterator("/dev/shm", error)) {
    const auto name = entry.path().filename().string();
    if (!name.starts_with(mine)) continue;
    const std::string_view rest = std::string_view(name).substr(mine.size());
    long pid = 0;
    const auto [end, ec] = std::from_chars(rest.data(), rest.data() + rest.size(), pid);
    if (ec != std::errc() || end == rest.data() || pid <= 0) continue;
    if (::kill(static_cast<pid_t>(pid), 0) == 0 || errno != ESRCH) continue;
    ::shm_unlink(("/" + name).c_str());
  }
}

}  // namespace

std::string SnapshotArea::name_of(std::int64_t pid_ns, std::int64_t pid, std::int64_t nonce) {
  return "/" + std::string(kPrefix) + std::to_string(pid_ns) + "-" + std::to_string(pid) + "-" +
         std::to_string(nonce);
}

SnapshotArea::SnapshotArea(std::size_t slots, std::size_t slot_bytes) : slots_(slots) {
  remove_orphans();
  pid_ns_ = static_cast<std::int64_t>(this_pid_namespace());
  pid_ = static_cast<std::int64_t>(::getpid());
  std::random_device entropy;
  nonce_ = static_cast<std::int64_t>(((static_cast<std::uint64_t>(entropy()) << 32U) | entropy()) &
                                     0x7fffffffffffffffULL);
  name_ = name_of(pid_ns_, pid_, nonce_);
  fd_ = ::shm_open(name_.c_str(), O_CREAT | O_EXCL | O_RDWR, 0600);
  if (fd_ < 0) throw Error("elastic: cannot create " + name_ + " in /dev/shm: " + errno_text());
  named_ = true;
  const std::size_t slot = round_up(std::max<std::size_t>(slot_bytes, 1));
  const std::size_t total = data_start(slots) + slots * slot;
  // Reserved now: tmpfs hands pages out as they are touched, and a full one would end the
  // process with SIGBUS in the middle of a step.
  if (const int rc = ::posix_fallocate(fd_, 0, static_cast<off_t>(total)); rc != 0) {
    const std::string cause = std::strerror(rc);
    ::close(fd_);
    ::shm_unlink(name_.c_str());
    throw Error("elastic: /dev/shm has no room for " + std::to_string(total) +
                " bytes of state copies (" + cause + ")");
  }
  map(total);
  auto* header = reinterpret_cast<Header*>(base_);
  header->magic = kMagic;
  header->slots = slots;
  for (std::size_t i = 0; i < slots; ++i) {
    Entry& e = entries(base_)[i];
    e = Entry{};
    e.offset = data_start(slots) + i * slot;
    e.capacity = slot;
  }
}

SnapshotArea::~SnapshotArea() {
  if (base_ != nullptr) ::munmap(base_, mapped_);
  for (const auto& [at, bytes] : retired_) ::munmap(at, bytes);
  if (fd_ >= 0) ::close(fd_);
  unlink();
}

void SnapshotArea::map(std::size_t bytes) {
  // An earlier mapping stays until the end: copies still being sent may read from it.
  if (base_ != nullptr) retired_.emplace_back(base_, mapped_);
  base_ = nullptr;
  void* at = ::mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd_, 0);
  if (at == MAP_FAILED) throw Error("elastic: cannot map " + name_ + ": " + errno_text());
  base_ = static_cast<std::uint8_t*>(at);
  mapped_ = bytes;
}

void SnapshotArea::unlink() noexcept {
  if (!named_) return;
  ::shm_unlink(name_.c_str());
  named_ = false;
}

std::span<std::uint8_t> SnapshotArea::begin_write(std::size_t slot) {
  TESSERA_CHECK(slot < slots_, "SnapshotArea: no slot " + std::to_string(slot));
  Entry& e = entries(base_)[slot];
  store(e.sequence, load(e.sequence) | 1U);  // odd: being written
  return {base_ + e.offset, static_cast<std::size_t>(e.capacity)};
}

std::span<std::uint8_t> SnapshotArea::grow(std::size_t slot, std::size_t bytes) {
  TESSERA_CHECK(slot < slots_, "SnapshotArea: no slot " + std::to_string(slot));
  const std::size_t offset = mapped_;
  const std::size_t size = round_up(bytes + bytes / 8);
  if (const int rc = ::posix_fallocate(fd_, static_cast<off_t>(offset), static_cast<off_t>(size));
      rc != 0) {
    throw Error("elastic: /dev/shm has no room for " + std::to_string(offset + size) +
                " bytes of state copies (" + std::strerror(rc) + ")");
  }
  map(offset + size);
  Entry& e = entries(base_)[slot];
  e.offset = offset;
  e.capacity = size;
  return {base_ + offset, size};
}

void SnapshotArea::publish(std::size_t slot, std::int64_t step, std::int64_t epoch,
                           std::int64_t samples, std::int64_t world_size, std::size_t length) {
  TESSERA_CHECK(slot < slots_, "SnapshotArea: no slot " + std::to_string(slot));
  Entry& e = entries(base_)[slot];
  TESSERA_CHECK(length <= e.capacity, "SnapshotArea: a pack longer than its slot");
  e.step = step;
  e.epoch = epoch;
  e.samples = samples;
  e.world_size = world_size;
  e.length = length;
  store(e.sequence, (load(e.sequence) | 1U) + 1U);  // even again, and new
}

std::span<const std::uint8_t> SnapshotArea::bytes(std::size_t slot) const {
  TESSERA_CHECK(slot < slots_, "SnapshotArea: no slot " + std::to_string(slot));
  const Entry& e = entries(base_)[slot];
  return {base_ + e.offset, static_cast<std::size_t>(e.length)};
}

std::optional<SnapshotHandle> SnapshotHandle::open(std::int64_t pid_ns, std::int64_t pid,
                                                   std::int64_t nonce) {
  const int fd = ::shm_open(SnapshotArea::name_of(pid_ns, pid, nonce).c_str(), O_RDONLY, 0);
  if (fd < 0) return std::nullopt;
  return SnapshotHandle(fd);
}

SnapshotHandle::SnapshotHandle(SnapshotHandle&& other) noexcept
    : fd_(std::exchange(other.fd_, -1)) {}

SnapshotHandle& SnapshotHandle::operator=(SnapshotHandle&& other) noexcept {
  if (this != &other) {
    if (fd_ >= 0) ::close(fd_);
    fd_ = std::exchange(other.fd_, -1);
  }
  return *this;
}

SnapshotHandle::~SnapshotHandle() {
  if (fd_ >= 0) ::close(fd_);
}

std::vector<SlotRecord> SnapshotHandle::read() const {
  std::vector<SlotRecord> out;
  struct stat info {};
  if (::fstat(fd_, &info) != 0 || info.st_size < static_cast<off_t>(kPage)) return out;
  const auto size = static_cast<std::size_t>(info.st_size);
  void* at = ::mmap(nullptr, size, PROT_READ, MAP_SHARED, fd_, 0);
  if (at == MAP_FAILED) return out;
  const auto* base = static_cast<const std::uint8_t*>(at);
  const auto* header = reinterpret_cast<const Header*>(base);
  if (header->magic == kMagic && header->slots <= 64 && data_start(header->slots) <= size) {
    const auto* entry = reinterpret_cast<const Entry*>(base + sizeof(Header));
    for (std::uint64_t i = 0; i < header->slots; ++i) {
      const Entry& e = entry[i];
      const std::uint64_t before = load(e.sequence);
      if (before == 0 || (before & 1U) != 0) continue;
      SlotRecord record{e.step, e.epoch, e.samples, e.world_size, {}};
      const std::uint64_t offset = e.offset;
      const std::uint64_t length = e.length;
      if (offset > size || length > size - offset) continue;  // moved past this mapping
      record.bytes.assign(base + offset, base + offset + length);
      std::atomic_thread_fence(std::memory_order_acquire);
      if (load(e.sequence) != before) continue;  // rewritten while copied
      out.push_back(std::move(record));
    }
  }
  ::munmap(at, size);
  std::ranges::sort(out, [](const SlotRecord& a, const SlotRecord& b) { return a.step > b.step; });
  return out;
}

}  // namespace tessera::elastic
