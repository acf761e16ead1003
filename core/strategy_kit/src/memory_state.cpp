#include "tessera/strategy_kit/memory_state.hpp"

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <string>
#include <string_view>

#if defined(__SSE2__)
#include <emmintrin.h>
#endif

#include "byte_gather.hpp"
#include "tessera/base/buffer_view.hpp"
#include "tessera/base/error.hpp"

namespace tessera {

namespace {

// The records of a pack. Every number is a u64 in host order (the ranks of one world share it):
//   blob:  kind 1, name length, name, byte count, bytes
//   slice: kind 2, description, values (description.elements() floats)
//   description: layer, param length, param, shape rank, extents, kind (0 parameter,
//                1 optimizer state), slot, dim, begin, end, first, last
// A description's bytes are a function of the StateSlice and back (every field, lengths first),
// so two slices are equal exactly when their packed descriptions are.
constexpr std::uint64_t kBlobRecord = 1;
constexpr std::uint64_t kSliceRecord = 2;
constexpr std::uint64_t kMostShapeRank = 64;

struct PackedRecord {
  std::uint64_t kind = 0;
  std::span<const std::uint8_t> key;      // a blob's name; a slice's packed description
  std::span<const std::uint8_t> payload;  // a blob's bytes; a slice's values
  StateSlice slice;                       // kind == kSliceRecord: the description, checked
};

class PackReader {
 public:
  explicit PackReader(std::span<const std::uint8_t> bytes) : bytes_(bytes) {}

  [[nodiscard]] bool done() const noexcept { return at_ == bytes_.size(); }

  PackedRecord next() {
    PackedRecord record;
    record.kind = u64();
    if (record.kind == kBlobRecord) {
      record.key = take(u64());
      record.payload = take(u64());
      return record;
    }
    if (record.kind != kSliceRecord) {
      throw CheckpointError(
          "strategy state held in memory: its packed bytes hold a record of "
          "unknown kind " +
          std::to_string(record.kind));
    }
    const auto key_at = at_;
    record.slice = description();
    record.key = bytes_.subspan(key_at, at_ - key_at);
    // elements() fits a size_t (slice_problem checked it); its byte count might not.
    if (record.slice.elements() > (bytes_.size() - at_) / sizeof(float)) end_early();
    record.payload = take(record.slice.elements() * sizeof(float));
    return record;
  }

  // Reads a slice's description at the current position and checks it.
  StateSlice description() {
    StateSlice d;
    d.layer = u64();
    const auto param = take(u64());
    d.param.assign(reinterpret_cast<const char*>(param.data()), param.size());
    const auto rank = u64();
    if (rank > kMostShapeRank) {
      throw CheckpointError("strategy state held in memory: a slice of rank " +
                            std::to_string(rank));
    }
    d.shape.resize(rank);
    for (auto& extent : d.shape) extent = u64();
    const auto kind = u64();
    if (kind > 1) {
      throw CheckpointError("strategy state held in memory: a slice of unknown kind " +
                            std::to_string(kind));
    }
    d.kind = kind == 0 ? StateKind::parameter : StateKind::optimizer_state;
    for (std::size_t* field : {&d.slot, &d.dim, &d.begin, &d.end, &d.first, &d.last}) {
      *field = u64();
    }
    if (const auto problem = slice_problem(d); !problem.empty()) {
      throw CheckpointError("strategy state held in memory: the slice " + problem);
    }
    return d;
  }

 private:
  std::uint64_t u64() {
    std::uint64_t value = 0;
    std::memcpy(&value, take(sizeof value).data(), sizeof value);
    return value;
  }
  std::span<const std::uint8_t> take(std::uint64_t n) {
    if (n > bytes_.size() - at_) end_early();
    const auto part = bytes_.subspan(at_, n);
    at_ += n;
    return part;
  }
  [[noreturn]] static void end_early() {
    // Only a PackedCheckpointWriter wrote these bytes; a short read means the exchange broke.
    throw CheckpointError("strategy state held in memory: its packed bytes end early");
  }

  std::span<const std::uint8_t> bytes_;
  std::size_t at_ = 0;
};

std::string_view text_of(std::span<const std::uint8_t> bytes) {
  return {reinterpret_cast<const char*>(bytes.data()), bytes.size()};
}

[[noreturn]] void blob_written_twice(std::string_view name) {
  throw CheckpointError("strategy state: blob '" + std::string(name) +
                        "' written twice (by two ranks or twice by one); each rank's blob "
                        "names must differ from every other rank's");
}

[[noreturn]] void slice_written_twice(const StateSlice& slice) {
  throw CheckpointError("strategy state: slice '" + slice_blob_name(slice) +
                        "' written twice (by two ranks or twice by one); ranks must write "
                        "disjoint parts of each parameter");
}

void check_put_slice(const char* writer, const StateSlice& slice, std::span<const float> values) {
  const auto problem = slice_problem(slice);
  TESSERA_CHECK(problem.empty(), std::string(writer) + "::put_slice: the slice " + problem);
  TESSERA_CHECK(values.size() == slice.elements(),
                std::string(writer) + "::put_slice: " + std::to_string(values.size()) +
                    " values for a slice of " + std::to_string(slice.elements()));
}

// A slice's values go into the pack around the cache (streaming stores) where the target has
// them. The elastic runtime copies the whole state each step: ordinary stores would first read
// every target line from memory and then push the next step's parameters and optimizer state
// out of the cache; measured on the 2-core VM, that copy was most of a refresh.
void copy_values(std::uint8_t* to, const void* from, std::size_t n) {
  const auto* source = static_cast<const std::uint8_t*>(from);
#if defined(__SSE2__)
  constexpr std::size_t kStreamingFrom = 64 * 1024;  // below, the lines stay in cache anyway
  if (n >= kStreamingFrom) {
    const auto head = (16 - reinterpret_cast<std::uintptr_t>(to) % 16) % 16;
    std::memcpy(to, source, head);
    std::size_t i = head;
    for (; i + 64 <= n; i += 64) {
      const auto* in = reinterpret_cast<const __m128i*>(source + i);
      auto* out = reinterpret_cast<__m128i*>(to + i);
      const __m128i a = _mm_loadu_si128(in);
      const __m128i b = _mm_loadu_si128(in + 1);
      const __m128i c = _mm_loadu_si128(in + 2);
      const __m128i d = _mm_loadu_si128(in + 3);
      _mm_stream_si128(out, a);
      _mm_stream_si128(out + 1, b);
      _mm_stream_si128(out + 2, c);
      _mm_stream_si128(out + 3, d);
    }
    std::memcpy(to + i, source + i, n - i);
    // Streaming stores are weakly ordered: they land before whatever is stored next (the
    // send that hands the pack to another thread or rank).
    _mm_sfence();
    return;
  }
#endif
  if (n > 0) std::memcpy(to, source, n);
}

}  // namespace

PackedCheckpointWriter::PackedCheckpointWriter(std::vector<std::uint8_t>& out,
                                               bool replicated_on_every_rank)
    : base_(out.data()),
      capacity_(out.size()),
      grow_(&out),
      spill_(nullptr),
      replicated_on_every_rank_(replicated_on_every_rank) {}

PackedCheckpointWriter::PackedCheckpointWriter(std::span<std::uint8_t> place,
                                               std::vector<std::uint8_t>& overflow,
                                               bool replicated_on_every_rank)
    : base_(place.data()),
      capacity_(place.size()),
      grow_(nullptr),
      spill_(&overflow),
      replicated_on_every_rank_(replicated_on_every_rank) {}

std::uint8_t* PackedCheckpointWriter::claim(std::size_t n) {
  if (n > capacity_ - used_) {
    if (grow_ == nullptr) {
      // The place is full: what was written moves to the overflow buffer, which grows from here.
      spill_->resize(std::max(used_ + n, 2 * capacity_));
      if (used_ > 0) std::memcpy(spill_->data(), base_, used_);
      grow_ = spill_;
    } else {
      // Only growth zeroes (and vector grows geometrically); a reused buffer is written in place.
      grow_->resize(used_ + n);
    }
    base_ = grow_->data();
    capacity_ = grow_->size();
  }
  auto* at = base_ + used_;
  used_ += n;
  return at;
}

void PackedCheckpointWriter::write_u64(std::uint64_t value) {
  std::memcpy(claim(sizeof value), &value, sizeof value);
}

void PackedCheckpointWriter::write_bytes(const void* data, std::size_t n) {
  if (n > 0) std::memcpy(claim(n), data, n);
}

void PackedCheckpointWriter::put(const std::string& name, std::span<const std::byte> bytes) {
  write_u64(kBlobRecord);
  write_u64(name.size());
  keys_.push_back({false, used_, name.size()});
  write_bytes(name.data(), name.size());
  write_u64(bytes.size());
  write_bytes(bytes.data(), bytes.size());
}

void PackedCheckpointWriter::put_slice(const StateSlice& slice, std::span<const float> values) {
  check_put_slice("PackedCheckpointWriter", slice, values);
  write_u64(kSliceRecord);
  const auto key_at = used_;
  write_u64(slice.layer);
  write_u64(slice.param.size());
  write_bytes(slice.param.data(), slice.param.size());
  write_u64(slice.shape.size());
  for (const auto extent : slice.shape) write_u64(extent);
  write_u64(slice.kind == StateKind::parameter ? 0 : 1);
  for (const auto field : {slice.slot, slice.dim, slice.begin, slice.end, slice.first, slice.last})
    write_u64(field);
  keys_.push_back({true, key_at, used_ - key_at});
  if (!values.empty()) copy_values(claim(values.size_bytes()), values.data(), values.size_bytes());
}

void PackedCheckpointWriter::finish() {
  if (grow_ != nullptr) {
    grow_->resize(used_);
    base_ = grow_->data();
  }
  const auto text = [&](const Key& key) {
    return std::string_view(reinterpret_cast<const char*>(base_) + key.at, key.length);
  };
  std::ranges::sort(keys_, [&](const Key& a, const Key& b) {
    return a.slice != b.slice ? a.slice < b.slice : text(a) < text(b);
  });
  const auto twice = std::ranges::adjacent_find(
      keys_, [&](const Key& a, const Key& b) { return a.slice == b.slice && text(a) == text(b); });
  if (twice == keys_.end()) return;
  if (!twice->slice) blob_written_twice(text(*twice));
  const auto* key = base_ + twice->at;
  slice_written_twice(PackReader({key, twice->length}).description());
}

std::vector<std::uint8_t> pack_memory_checkpoint(const MemoryCheckpoint& state) {
  std::vector<std::uint8_t> out;
  pack_memory_checkpoint(state, out);
  return out;
}

void pack_memory_checkpoint(const MemoryCheckpoint& state, std::vector<std::uint8_t>& out) {
  PackedCheckpointWriter writer(out, state.every_rank_writes_replicated_state());
  for (const auto& [name, bytes] : state.blobs()) writer.put(name, bytes);
  const auto slices = state.slices();
  for (std::size_t i = 0; i < slices.size(); ++i) {
    writer.put_slice(slices[i], state.slice_values_view(i));
  }
  writer.finish();
}

void unpack_memory_checkpoint(std::span<const std::uint8_t> bytes, MemoryCheckpoint& into) {
  PackReader in(bytes);
  std::vector<float> values;
  while (!in.done()) {
    const auto record = in.next();
    if (record.kind == kBlobRecord) {
      into.put(std::string(text_of(record.key)), std::as_bytes(record.payload));
      continue;
    }
    // The packed values need not be aligned for float.
    values.resize(record.slice.elements());
    std::memcpy(values.data(), record.payload.data(), record.payload.size());
    into.put_slice(record.slice, values);
  }
}

std::uint64_t packed_layout_digest(std::span<const std::uint8_t> bytes) {
  std::uint64_t hash = 14695981039346656037ULL;
  const auto mix = [&](std::span<const std::uint8_t> part) {
    for (const auto byte : part) {
      hash ^= byte;
      hash *= 1099511628211ULL;
    }
  };
  const auto mix_u64 = [&](std::uint64_t value) {
    std::uint8_t raw[sizeof value];
    std::memcpy(raw, &value, sizeof value);
    mix(raw);
  };
  PackReader in(bytes);
  while (!in.done()) {
    const auto record = in.next();
    mix_u64(record.kind);
    mix_u64(record.key.size());
    mix(record.key);
    mix_u64(record.payload.size());
  }
  return hash;
}

MemoryCheckpoint::MemoryCheckpoint(int saved_world_size, bool replicated_on_every_rank)
    : saved_world_size_(saved_world_size), replicated_on_every_rank_(replicated_on_every_rank) {
  TESSERA_CHECK(saved_world_size >= 1, "MemoryCheckpoint: the world size must be at least 1");
}

void MemoryCheckpoint::put(const std::string& name, std::span<const std::byte> bytes) {
  const auto [it, added] = blobs_.try_emplace(name, bytes.begin(), bytes.end());
  if (!added) blob_written_twice(name);
}

std::vector<std::byte> MemoryCheckpoint::get(const std::string& name) const {
  const auto it = blobs_.find(name);
  if (it == blobs_.end()) {
    throw CheckpointError("strategy state held in memory has no blob '" + name +
                          "': it was saved by another strategy or model");
  }
  return it->second;
}

bool MemoryCheckpoint::contains(const std::string& name) const {
  return blobs_.count(name) != 0;
}

void MemoryCheckpoint::put_slice(const StateSlice& slice, std::span<const float> values) {
  check_put_slice("MemoryCheckpoint", slice, values);
  for (const auto& held : slices_) {
    if (held.slice == slice) slice_written_twice(slice);
  }
  slices_.push_back({slice, std::vector<float>(values.begin(), values.end())});
}

std::vector<StateSlice> MemoryCheckpoint::slices() const {
  std::vector<StateSlice> out;
  out.reserve(slices_.size());
  for (const auto& held : slices_) out.push_back(held.slice);
  return out;
}

std::vector<float> MemoryCheckpoint::slice_values(std::size_t index) const {
  const auto values = slice_values_view(index);
  return {values.begin(), values.end()};
}

std::span<const float> MemoryCheckpoint::slice_values_view(std::size_t index) const {
  if (index >= slices_.size()) {
    throw CheckpointError("strategy state held in memory has " + std::to_string(slices_.size()) +
                          " slices, not one numbered " + std::to_string(index));
  }
  return slices_[index].values;
}

std::size_t MemoryCheckpoint::bytes() const noexcept {
  std::size_t total = 0;
  for (const auto& [name, bytes] : blobs_) total += bytes.size();
  for (const auto& held : slices_) total += held.values.size() * sizeof(float);
  return total;
}

std::vector<std::vector<std::uint8_t>> all_gather_bytes(Communicator& world,
                                                        std::vector<std::uint8_t> mine) {
  const auto n = static_cast<std::size_t>(world.size());
  std::int64_t my_length = static_cast<std::int64_t>(mine.size());
  std::vector<std::int64_t> lengths(n);
  world
      .all_gather(view_of(std::span<std::int64_t>(&my_length, 1)),
                  view_of(std::span<std::int64_t>(lengths)))
      ->wait(world.timeout());
  const auto longest = static_cast<std::size_t>(*std::max_element(lengths.begin(), lengths.end()));
  std::vector<std::vector<std::uint8_t>> out(n);
  if (longest == 0) return out;
  mine.resize(longest, 0);
  std::vector<std::uint8_t> all(longest * n);
  world.all_gather(view_of(std::span<std::uint8_t>(mine)), view_of(std::span<std::uint8_t>(all)))
      ->wait(world.timeout());
  for (std::size_t r = 0; r < n; ++r) {
    const auto* begin = all.data() + r * longest;
    out[r].assign(begin, begin + lengths[r]);
  }
  return out;
}

std::shared_ptr<const MemoryCheckpoint> gather_state_in_memory(Strategy& strategy,
                                                               Communicator& world) {
  MemoryCheckpoint mine(world.size());
  strategy.save(mine);
  auto state = std::make_shared<MemoryCheckpoint>(world.size());
  for (const auto& bytes : all_gather_bytes(world, pack_memory_checkpoint(mine))) {
    unpack_memory_checkpoint(bytes, *state);
  }
  return state;
}

}  // namespace tessera
