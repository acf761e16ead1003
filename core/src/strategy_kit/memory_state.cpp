#include "tessera/strategy_kit/memory_state.hpp"

#include <algorithm>
#include <cstdint>
#include <cstring>

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

std::vector<std::uint8_t> pack(const MemoryCheckpoint& state) {
  std::vector<std::uint8_t> out;
  out.reserve(state.bytes() + 64 * (state.blobs().size() + 1));
  append_u64(out, state.blobs().size());
  for (const auto& [name, bytes] : state.blobs()) {
    append_u64(out, name.size());
    append_bytes(out, name.data(), name.size());
    append_u64(out, bytes.size());
    append_bytes(out, bytes.data(), bytes.size());
  }
  return out;
}

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
    TESSERA_CHECK(n <= bytes_.size() - at_, "gather_state_in_memory: a rank's blobs arrived cut");
    const auto part = bytes_.subspan(at_, n);
    at_ += n;
    return part;
  }

 private:
  std::span<const std::uint8_t> bytes_;
  std::size_t at_ = 0;
};

}  // namespace

MemoryCheckpoint::MemoryCheckpoint(int saved_world_size) : saved_world_size_(saved_world_size) {
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

std::size_t MemoryCheckpoint::bytes() const noexcept {
  std::size_t total = 0;
  for (const auto& [name, bytes] : blobs_) total += bytes.size();
  return total;
}

std::shared_ptr<const MemoryCheckpoint> gather_state_in_memory(Strategy& strategy,
                                                               Communicator& world) {
  const int size = world.size();
  MemoryCheckpoint mine(size);
  strategy.save(mine);
  std::vector<std::uint8_t> packed = pack(mine);

  std::int64_t my_length = static_cast<std::int64_t>(packed.size());
  std::vector<std::int64_t> lengths(static_cast<std::size_t>(size));
  world
      .all_gather(view_of(std::span<std::int64_t>(&my_length, 1)),
                  view_of(std::span<std::int64_t>(lengths)))
      ->wait(world.timeout());
  const auto longest = static_cast<std::size_t>(*std::max_element(lengths.begin(), lengths.end()));
  packed.resize(longest, 0);
  std::vector<std::uint8_t> all(longest * static_cast<std::size_t>(size));
  world.all_gather(view_of(std::span<std::uint8_t>(packed)), view_of(std::span<std::uint8_t>(all)))
      ->wait(world.timeout());

  auto state = std::make_shared<MemoryCheckpoint>(size);
  for (std::size_t r = 0; r < static_cast<std::size_t>(size); ++r) {
    Unpacker in(std::span<const std::uint8_t>(all).subspan(r * longest,
                                                           static_cast<std::size_t>(lengths[r])));
    const auto count = in.u64();
    for (std::uint64_t b = 0; b < count; ++b) {
      const auto name_bytes = in.take(in.u64());
      const std::string name(reinterpret_cast<const char*>(name_bytes.data()), name_bytes.size());
      const auto blob = in.take(in.u64());
      state->put(name, std::as_bytes(blob));
    }
  }
  return state;
}

}  // namespace tessera
