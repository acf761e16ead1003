#pragma once
// The shared-memory segment of one group: its layout and its mapping.
//
// Layout (every part cache-line or page aligned, so no two ranks write one line):
//   Header | RankSlot[size] | ChannelControl[size * size] | staging[size][2] |
//   channel[size*size][2]
// A rank writes only its own RankSlot, its own staging buffers and the channels it sends on
// (plus the `received` counter of the channels it receives on); everybody else only reads them.

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <string>

namespace tessera::shm {

inline constexpr std::size_t kCacheLine = 64;
inline constexpr std::size_t kPage = 4096;
// The name prefix of every segment in /dev/shm; names are kSegmentPrefix<pid>-<random>.
inline constexpr const char* kSegmentPrefix = "tessera-shm-";

// Where a group has gone wrong, published so that every rank learns it at once.
enum class FailureKind : std::uint32_t { none = 0, claimed = 1, died = 2, aborted = 3 };

struct alignas(kCacheLine) Header {
  std::uint64_t magic;
  std::uint32_t version;
  std::int32_t size;
  std::uint64_t staging_bytes;  // one staging buffer; each rank has two
  std::uint64_t channel_bytes;  // payload of one channel slot; each channel has two
  std::uint64_t total_bytes;
  alignas(kCacheLine) std::atomic<std::uint32_t> attached;
  // Futex word: bumped by every publish that finds sleepers, so sleepers wake and re-check.
  alignas(kCacheLine) std::atomic<std::uint32_t> epoch;
  std::atomic<std::uint32_t> sleepers;
  alignas(kCacheLine) std::atomic<std::uint32_t> failure;  // FailureKind
  std::int32_t failed_rank;
  char failure_reason[200];
};

// progress = 3 * step + phase: a single monotonic counter per rank tells peers how far it has
// got through the group's collective steps (see collectives.cpp).
struct alignas(kCacheLine) RankSlot {
  std::atomic<std::uint64_t> progress;
  std::atomic<std::int32_t> pid;  // 0 until the rank has attached
  // Bumped by the rank's heartbeat thread (see Group): a count that stops moving means the
  // process makes no progress at all (stopped, frozen), as opposed to one busy computing.
  // On its own line, so that the beats never disturb the polled progress line.
  alignas(kCacheLine) std::atomic<std::uint64_t> heartbeat;
};

// One direction of a point-to-point channel (src -> dst): two slots used round robin.
struct alignas(kCacheLine) ChannelControl {
  std::atomic<std::uint64_t> sent;                          // slots filled by src, ever
  alignas(kCacheLine) std::atomic<std::uint64_t> received;  // slots drained by dst, ever
};

// The framing of one chunk of a message, at the start of its channel slot.
struct alignas(kCacheLine) ChunkHeader {
  std::uint32_t tag;
  std::uint64_t message_bytes;
  std::uint64_t offset;
  std::uint64_t length;
};

// A mapped segment. Move-only; unmaps on destruction and unlinks the name if it still owns it.
class Segment {
 public:
  // Creates a new segment with a unique name (and removes segments left behind by dead
  // processes), every page of it allocated before it is mapped: a /dev/shm that fills later
  // cannot take them back, so touching the segment never raises SIGBUS. Throws OutOfMemory
  // when /dev/shm cannot hold it (naming the bytes needed, of what and from which options,
  // against those free, and what to do), leaving nothing in /dev/shm; TransportError on any other
  // failure.
  static Segment create(int size, std::size_t staging_bytes, std::size_t channel_bytes);
  // Maps an existing segment by name as `rank` and checks that its layout matches this build
  // and `size`. A rank whose world size differs records that in the segment's failure record
  // (so the ranks waiting for it fail at once, naming it) and throws TransportError.
  static Segment open(const std::string& name, int rank, int size);

  Segment() = default;
  Segment(Segment&& other) noexcept;
  Segment& operator=(Segment&& other) noexcept;
  Segment(const Segment&) = delete;
  Segment& operator=(const Segment&) = delete;
  ~Segment();

  // Records the group's failure in the header for every rank to see, unless one is recorded
  // already (the first wins), and wakes the sleepers.
  void record_failure(FailureKind kind, int rank, const std::string& reason) const noexcept;

  // Removes the name from /dev/shm; the memory lives on until the last mapping goes. Every
  // rank calls it once all have attached, so a crash later cannot leak the segment.
  void unlink() noexcept;

  [[nodiscard]] const std::string& name() const noexcept { return name_; }
  [[nodiscard]] Header& header() const noexcept { return *static_cast<Header*>(base_); }
  [[nodiscard]] RankSlot& rank_slot(int rank) const noexcept;
  [[nodiscard]] ChannelControl& channel(int src, int dst) const noexcept;
  [[nodiscard]] std::byte* staging(int rank, std::uint64_t buffer) const noexcept;
  [[nodiscard]] std::byte* channel_slot(int src, int dst, std::uint64_t slot) const noexcept;
  [[nodiscard]] std::size_t staging_bytes() const noexcept { return staging_bytes_; }
  [[nodiscard]] std::size_t channel_bytes() const noexcept { return channel_bytes_; }

 private:
  // Throws OutOfMemory, naming the bytes a segment for `size` ranks needs (and of what)
  // against those free, when /dev/shm has less room free than that. create() asks before it
  // allocates: allocating a segment that cannot fit would take, for a moment, all the room
  // other processes' mappings still need. Does nothing where /dev/shm cannot be queried.
  static void require_room(int size, std::size_t staging_bytes, std::size_t channel_bytes);
  void map(int fd, std::size_t bytes);
  void release() noexcept;
  void compute_offsets();

  std::string name_;
  bool owns_name_ = false;
  void* base_ = nullptr;
  std::size_t bytes_ = 0;
  int size_ = 0;
  std::size_t staging_bytes_ = 0;
  std::size_t channel_bytes_ = 0;
  std::size_t slots_offset_ = 0;
  std::size_t channels_offset_ = 0;
  std::size_t staging_offset_ = 0;
  std::size_t channel_data_offset_ = 0;
};

}  // namespace tessera::shm
