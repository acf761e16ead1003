#pragma once
// A rank's newest snapshots of its strategy state in POSIX shared memory, so that the ranks on
// its host that keep its copies need no bytes sent: each opens the segment once per world and
// holds its descriptor, which keeps the memory alive after the owner's process is gone (the
// name is removed as soon as they have opened it, so nothing is left in /dev/shm).
//
// Layout: a header, one entry per slot, then the slots' bytes (page aligned). A slot is written
// under a sequence count (odd while writing): a reader takes a slot only when the count was even
// and unchanged around its copy, so a writer killed half way leaves the slot unreadable, not
// torn. A pack that outgrows its slot moves to a larger region at the end of the segment.
#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <utility>
#include <vector>

namespace tessera::elastic {

// What a published slot holds: the state after `step` steps, at sample `samples` of `epoch`,
// saved by a world of `world_size` ranks; `bytes` long.
struct SlotRecord {
  std::int64_t step = -1;
  std::int64_t epoch = 0;
  std::int64_t samples = 0;
  std::int64_t world_size = 0;
  std::vector<std::uint8_t> bytes;
};

// The owner's side. Not thread-safe.
class SnapshotArea {
 public:
  // Creates "/tessera-replica-<pid namespace>-<pid>-<nonce>" with `slots` slots of `slot_bytes`
  // each, its pages reserved up front (so a full /dev/shm refuses here, not with SIGBUS later),
  // after removing the areas of this pid namespace whose process is gone. Throws Error naming the
  // cause when /dev/shm refuses; the caller then sends its copies instead.
  SnapshotArea(std::size_t slots, std::size_t slot_bytes);
  ~SnapshotArea();
  SnapshotArea(const SnapshotArea&) = delete;
  SnapshotArea& operator=(const SnapshotArea&) = delete;

  // What names the area: the writer's pid namespace (the inode of /proc/self/ns/pid), pid and a
  // random nonce.
  [[nodiscard]] std::int64_t pid_namespace() const noexcept { return pid_ns_; }
  [[nodiscard]] std::int64_t pid() const noexcept { return pid_; }
  [[nodiscard]] std::int64_t nonce() const noexcept { return nonce_; }
  [[nodiscard]] static std::string name_of(std::int64_t pid_ns, std::int64_t pid,
                                           std::int64_t nonce);
  // Removes the name: those that opened the area keep it.
  void unlink() noexcept;

  [[nodiscard]] std::size_t slots() const noexcept { return slots_; }
  // Marks slot `slot` unreadable and returns where to write it.
  [[nodiscard]] std::span<std::uint8_t> begin_write(std::size_t slot);
  // Gives slot `slot` a region of at least `bytes` (a pack that outgrew it) and returns it.
  // Throws Error when /dev/shm has no room for it.
  [[nodiscard]] std::span<std::uint8_t> grow(std::size_t slot, std::size_t bytes);
  // Makes slot `slot` readable: `length` bytes of the state after `step`.
  void publish(std::size_t slot, std::int64_t step, std::int64_t epoch, std::int64_t samples,
               std::int64_t world_size, std::size_t length);
  // The published bytes of slot `slot` (this process's own view).
  [[nodiscard]] std::span<const std::uint8_t> bytes(std::size_t slot) const;

 private:
  void map(std::size_t bytes);

  int fd_ = -1;
  std::int64_t pid_ns_ = 0;
  std::int64_t pid_ = 0;
  std::int64_t nonce_ = 0;
  std::string name_;
  bool named_ = false;
  std::size_t slots_ = 0;
  std::uint8_t* base_ = nullptr;
  std::size_t mapped_ = 0;
  std::vector<std::pair<std::uint8_t*, std::size_t>> retired_;  // mappings before a grow()
};

// Another rank's area, opened on this host. Move-only; closes on destruction.
class SnapshotHandle {
 public:
  // Opens the area named by SnapshotArea::name_of read-only; nullopt when there is none here
  // (the owner is on another host).
  [[nodiscard]] static std::optional<SnapshotHandle> open(std::int64_t pid_ns, std::int64_t pid,
                                                          std::int64_t nonce);
  SnapshotHandle(SnapshotHandle&& other) noexcept;
  SnapshotHandle& operator=(SnapshotHandle&& other) noexcept;
  SnapshotHandle(const SnapshotHandle&) = delete;
  SnapshotHandle& operator=(const SnapshotHandle&) = delete;
  ~SnapshotHandle();

  // Copies of every slot that is published and whole, newest first.
  [[nodiscard]] std::vector<SlotRecord> read() const;

 private:
  explicit SnapshotHandle(int fd) : fd_(fd) {}
  int fd_ = -1;
};

}  // namespace tessera::elastic
