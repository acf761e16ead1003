#include "tessera/strategy_kit/memory_state.hpp"

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <string>

#include "strategy_kit/byte_gather.hpp"
#include "tessera/base/buffer_view.hpp"
#include "tessera/base/error.hpp"

namespace tessera {

namespace {

// One rank's blobs as one byte string: count, then per blob the name's and the blob's length
// (u64, host order: the ranks of one world share it) each followed by its bytes.
void append_u64(std::vector<std::uint8_t>& out, std::uint64_t value) {
  const auto at = out.size();
  out.resize(at + sizeof value);
  std::memcpy(out.data() + at, &value, sizeof value);
}

void append_bytes(std::vector<std::uint8_t>& out, const void* data, std::size_t n) {
  const auto at = out.size();
  out.resize(at + n);
  if (n > 0) std::memcpy(out.data() + at, data, n);
}

void append_text(std::vector<std::uint8_t>& out, const std::string& text) {
  append_u64(out, text.size());
  append_bytes(out, text.data(), text.size());
}

}  // namespace

std::vector<std::uint8_t> pack_memory_checkpoint(const MemoryCheckpoint& state) {
  std::vector<std::uint8_t> out;
  pack_memory_checkpoint(state, out);
  return out;
}

void pack_memory_checkpoint(const MemoryCheckpoint& state, std::vector<std::uint8_t>& out) {
  out.clear();
  out.reserve(state.bytes() + 64 * (state.blobs().size() + 1));
  append_u64(out, state.blobs().size());
  for (const auto& [name, bytes] : state.blobs()) {
    append_u64(out, name.size());
    append_bytes(out, name.data(), name.size());
    append_u64(out, bytes.size());
    append_bytes(out, bytes.data(), bytes.size());
  }
  // Then the slices: each description field by field, then its values.
  const auto slices = state.slices();
  append_u64(out, slices.size());
  for (std::size_t i = 0; i < slices.size(); ++i) {
    const StateSlice& d = slices[i];
    append_u64(out, d.layer);
    append_text(out, d.param);
    append_u64(out, d.shape.size());
    for (const auto extent : d.shape) append_u64(out, extent);
    append_u64(out, d.kind == StateKind::parameter ? 0 : 1);
    for (const auto field : {d.slot, d.dim, d.begin, d.end, d.first, d.last}) {
      append_u64(out, field);
    }
    const auto values = state.slice_values_view(i);
    append_bytes(out, values.data(), values.size() * sizeof(float));
  }
}

namespace {

class Unpacker {
 public:
  explicit Unpacker(std::span<const std::uint8_t> bytes) : bytes_(bytes) {}
  std::uint64_t u64() {
    std::uint64_t value = 0;
    std::memcpy(&value, take(sizeof value).data(), sizeof value);
    return value;
  }
  std::span<const std::uint8_t> take(std::uint64_t n) {
    // Only our own pack() wrote these bytes; a short read means the exchange itself broke.
    if (n > bytes_.size() - at_) {
      throw CheckpointError("strategy state held in memory: its packed bytes end early");
    }
    const auto part = bytes_.subspan(at_, n);
    at_ += n;
    return part;
  }

 private:
  std::span<const std::uint8_t> bytes_;
  std::size_t at_ = 0;
};

}  // namespace

MemoryCheckpoint::MemoryCheckpoint(int saved_world_size, bool replicated_on_every_rank)
    : saved_world_size_(saved_world_size), replicated_on_every_rank_(replicated_on_every_rank) {
  TESSERA_CHECK(saved_world_size >= 1, "MemoryCheckpoint: the world size must be at least 1");
}

void MemoryCheckpoint::put(const std::string& name, std::span<const std::byte> bytes) {
  const auto [it, added] = blobs_.try_emplace(name, bytes.begin(), bytes.end());
  if (!added) {
    throw CheckpointError("strategy state: blob '" + name +
                          "' written twice (by two ranks or twice by one); each rank's blob "
                          "names must differ from every other rank's");
  }
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
  const auto problem = slice_problem(slice);
  TESSERA_CHECK(problem.empty(), "MemoryCheckpoint::put_slice: the slice " + problem);
  TESSERA_CHECK(values.size() == slice.elements(),
                "MemoryCheckpoint::put_slice: " + std::to_string(values.size()) +
                    " values for a slice of " + std::to_string(slice.elements()));
  for (const auto& held : slices_) {
    if (held.slice == slice) {
      throw CheckpointError("strategy state: slice '" + slice_blob_name(slice) +
                            "' written twice (by two ranks or twice by one); ranks must write "
                            "disjoint parts of each parameter");
    }
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

void unpack_memory_checkpoint(std::span<const std::uint8_t> bytes, MemoryCheckpoint& into) {
  Unpacker in(bytes);
  const auto count = in.u64();
  for (std::uint64_t b = 0; b < count; ++b) {
    const auto name_bytes = in.take(in.u64());
    const std::string name(reinterpret_cast<const char*>(name_bytes.data()), name_bytes.size());
    const auto blob = in.take(in.u64());
    into.put(name, std::as_bytes(blob));
  }
  const auto slice_count = in.u64();
  for (std::uint64_t k = 0; k < slice_count; ++k) {
    StateSlice d;
    d.layer = in.u64();
    const auto param = in.take(in.u64());
    d.param.assign(reinterpret_cast<const char*>(param.data()), param.size());
    const auto rank_count = in.u64();
    if (rank_count > 64)
      throw CheckpointError("strategy state held in memory: a slice of rank " +
                            std::to_string(rank_count));
    d.shape.resize(rank_count);
    for (auto& extent : d.shape) extent = in.u64();
    d.kind = in.u64() == 0 ? StateKind::parameter : StateKind::optimizer_state;
    for (std::size_t* field : {&d.slot, &d.dim, &d.begin, &d.end, &d.first, &d.last}) {
      *field = in.u64();
    }
    if (const auto problem = slice_problem(d); !problem.empty()) {
      throw CheckpointError("strategy state held in memory: the slice " + problem);
    }
    const auto raw = in.take(d.elements() * sizeof(float));
    std::vector<float> values(d.elements());
    if (!raw.empty()) std::memcpy(values.data(), raw.data(), raw.size());
    into.put_slice(d, values);
  }
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
