#pragma once
// A strategy's state held in memory instead of a checkpoint folder, for Strategy::reconfigure()
// when the world changes by plan: the old world saves into memory and exchanges it, and the new
// world reads it back as it would read a checkpoint, without touching a disk.

#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "tessera/plugin/checkpoint_io.hpp"
#include "tessera/plugin/communicator.hpp"
#include "tessera/plugin/strategy.hpp"

namespace tessera {

// Named blobs and parameter slices in memory, written by save() and read by load() or
// reconfigure(). Not
// thread-safe: one rank's thread writes it, then any number of threads may read it.
class MemoryCheckpoint final : public CheckpointWriter, public CheckpointReader {
 public:
  // saved_world_size: the size of the world whose ranks write into it. replicated_on_every_rank:
  // what every_rank_writes_replicated_state() answers; true for a copy of one rank's state kept
  // apart from the others' (the elastic runtime's), false where the ranks write into one.
  explicit MemoryCheckpoint(int saved_world_size, bool replicated_on_every_rank = false);

  // Copies `bytes`. Throws CheckpointError for a name already written: blob names must not
  // collide across ranks (Strategy::save), and a collision would silently lose one rank's part.
  void put(const std::string& name, std::span<const std::byte> bytes) override;
  // Throws CheckpointError naming a blob that is not there.
  [[nodiscard]] std::vector<std::byte> get(const std::string& name) const override;
  [[nodiscard]] bool contains(const std::string& name) const override;
  // Copies `values`. Throws InvalidArgument for a slice that does not describe a part of its
  // parameter or a value count that differs from it, CheckpointError for a slice written twice.
  void put_slice(const StateSlice& slice, std::span<const float> values) override;
  [[nodiscard]] std::vector<StateSlice> slices() const override;
  [[nodiscard]] std::vector<float> slice_values(std::size_t index) const override;
  [[nodiscard]] int saved_world_size() const override { return saved_world_size_; }
  [[nodiscard]] bool every_rank_writes_replicated_state() const override {
    return replicated_on_every_rank_;
  }
  // slice_values(index) without the copy; valid while this object is.
  [[nodiscard]] std::span<const float> slice_values_view(std::size_t index) const;

  [[nodiscard]] const std::map<std::string, std::vector<std::byte>>& blobs() const noexcept {
    return blobs_;
  }
  // Bytes of all blobs and slice values together.
  [[nodiscard]] std::size_t bytes() const noexcept;

 private:
  struct HeldSlice {
    StateSlice slice;
    std::vector<float> values;
  };
  std::map<std::string, std::vector<std::byte>> blobs_;
  std::vector<HeldSlice> slices_;  // in the order written
  int saved_world_size_;
  bool replicated_on_every_rank_;
};

// A strategy's saved state as one byte string, to move it between ranks (the elastic runtime
// keeps copies of each rank's state on others this way). The layout is host order and this
// build's: for ranks of one job, never for files. It is a stream of records in the order written:
// a blob (its name and bytes) or a slice (its description and values).
//
// Writes what a strategy's save() hands it straight into that form: one copy of each value and
// no buffer per blob or slice. `out` is overwritten and keeps its capacity; a buffer that held a
// pack at least as long before is written without growing or zeroing, so a caller that saves
// every step (the elastic runtime's replicas) touches no fresh memory. Not thread-safe; `out`
// must outlive the writer and holds the complete pack only once finish() returned.
class PackedCheckpointWriter final : public CheckpointWriter {
 public:
  // replicated_on_every_rank: as for MemoryCheckpoint. The pack does not hold the world size;
  // whoever unpacks it knows the world it came from.
  explicit PackedCheckpointWriter(std::vector<std::uint8_t>& out,
                                  bool replicated_on_every_rank = false);
  // Writes into `place` (memory the caller keeps, shared memory say) as long as the pack fits;
  // a pack that outgrows it moves to `overflow` (overwritten) and goes on there: overflowed()
  // says which holds it once finish() returned, size() how long it is.
  PackedCheckpointWriter(std::span<std::uint8_t> place, std::vector<std::uint8_t>& overflow,
                         bool replicated_on_every_rank = false);

  // Copies `bytes`. A name written twice is reported by finish().
  void put(const std::string& name, std::span<const std::byte> bytes) override;
  // Copies `values`. Throws InvalidArgument as MemoryCheckpoint::put_slice does; a slice written
  // twice is reported by finish().
  void put_slice(const StateSlice& slice, std::span<const float> values) override;
  [[nodiscard]] bool every_rank_writes_replicated_state() const override {
    return replicated_on_every_rank_;
  }

  // Trims `out` to the records written. Throws CheckpointError, with MemoryCheckpoint's
  // messages, for a blob name or a slice written twice; `out` is then no pack to use.
  void finish();
  [[nodiscard]] bool overflowed() const noexcept { return spill_ != nullptr && grow_ == spill_; }
  [[nodiscard]] std::size_t size() const noexcept { return used_; }

 private:
  // Where a blob's name or a slice's packed description lies in out_: the duplicate check
  // compares these bytes, sorted, once per pack instead of each write against all before it.
  struct Key {
    bool slice = false;
    std::size_t at = 0;
    std::size_t length = 0;
  };
  std::uint8_t* claim(std::size_t n);
  void write_u64(std::uint64_t value);
  void write_bytes(const void* data, std::size_t n);

  std::uint8_t* base_;                // where the pack is written: place, or *grow_'s data
  std::size_t capacity_;              // bytes at base_
  std::vector<std::uint8_t>* grow_;   // grown on demand; null while writing into place
  std::vector<std::uint8_t>* spill_;  // the overflow buffer of a placed pack
  std::size_t used_ = 0;              // the bytes beyond it are left from an earlier pack
  std::vector<Key> keys_;
  bool replicated_on_every_rank_;
};

// pack_memory_checkpoint: `state` in that form (blobs by name, then slices in the order written).
// unpack_memory_checkpoint adds what `bytes` holds to `into` and throws CheckpointError for bytes
// that end early, hold a record of an unknown kind or describe a slice that is not a part of its
// parameter, and for blob names or slices `into` already has.
[[nodiscard]] std::vector<std::uint8_t> pack_memory_checkpoint(const MemoryCheckpoint& state);
// The same into `out`, replacing what it held and keeping its capacity.
void pack_memory_checkpoint(const MemoryCheckpoint& state, std::vector<std::uint8_t>& out);
void unpack_memory_checkpoint(std::span<const std::uint8_t> bytes, MemoryCheckpoint& into);

// What a pack holds without the values: blob names and sizes and slice descriptions, in the order
// written, hashed (FNV-1a, the same in every process of a build). Equal for the packs of two
// save()s that wrote the same blobs and slices in the same order. Reads only the records'
// headers. Throws CheckpointError as unpack_memory_checkpoint does for malformed bytes.
[[nodiscard]] std::uint64_t packed_layout_digest(std::span<const std::uint8_t> bytes);

// Collective over `world` (the old world, every rank alive), between steps, before a planned
// world change: every rank save()s `strategy` into memory and the ranks all-gather their blobs,
// so each returns the whole state, as the world's checkpoint would hold it, ready for
// reconfigure() on the new world. Blocks until the exchange is complete.
//
// Cost: each rank receives every rank's blobs, in two all-gathers (sizes, then blobs padded to
// the largest), so it holds and receives the whole model and optimizer state for a moment,
// world_size times the largest rank's share; for a sharded strategy (zero, zero3) that is the
// unsharded state on every rank. Fine for a planned change of a small model; a dead rank's share
// is not there at all (issue 15 keeps replicas of each share for that).
//
// Throws TransportError/Timeout from the communicator, CheckpointError when two ranks write the
// same blob name.
[[nodiscard]] std::shared_ptr<const MemoryCheckpoint> gather_state_in_memory(Strategy& strategy,
                                                                             Communicator& world);

}  // namespace tessera
