#include "elastic/replica_ring.hpp"

#include <algorithm>
#include <cstring>
#include <limits>
#include <string>

#include "strategy_kit/byte_gather.hpp"
#include "tessera/base/buffer_view.hpp"
#include "tessera/base/error.hpp"
#include "tessera/runtime/trainer.hpp"

namespace tessera::elastic {

namespace {

// Tags of the ring's point-to-point messages: the distance along the ring in the low bits, so
// that copies for r+1 and r+2 never match each other's receives.
constexpr std::uint32_t kLengthTag = 0x454c0000;  // "EL"
constexpr std::uint32_t kBytesTag = 0x454d0000;

std::vector<std::int64_t> gather_i64(Communicator& world, std::vector<std::int64_t> mine) {
  std::vector<std::int64_t> all(mine.size() * static_cast<std::size_t>(world.size()));
  world.all_gather(view_of(std::span<std::int64_t>(mine)), view_of(std::span<std::int64_t>(all)))
      ->wait(world.timeout());
  return all;
}

// Sends `out` to `to` while receiving `in` from `from`. A transport may run a communicator's
// operations in turn and a send may wait for its receive, so around the ring even ranks send
// first and odd ranks receive first: no cycle of ranks all waiting in a send.
void exchange(Communicator& world, BufferView out, int to, BufferView in, int from,
              std::uint32_t tag) {
  std::shared_ptr<Work> sent;
  std::shared_ptr<Work> received;
  const bool send_first = world.rank() % 2 == 0;
  if (send_first && out.count > 0) sent = world.send(out, to, tag);
  if (in.count > 0) received = world.recv(in, from, tag);
  if (!send_first && out.count > 0) sent = world.send(out, to, tag);
  if (sent) sent->wait(world.timeout());
  if (received) received->wait(world.timeout());
}

void append_i64(std::vector<std::uint8_t>& out, std::int64_t value) {
  const auto at = out.size();
  out.resize(at + sizeof value);
  std::memcpy(out.data() + at, &value, sizeof value);
}

std::int64_t read_i64(const std::vector<std::uint8_t>& in, std::size_t& at) {
  std::int64_t value = 0;
  if (in.size() - at < sizeof value) {
    throw TransportError("elastic recovery: a rank's state arrived cut", std::nullopt,
                         "elastic state exchange");
  }
  std::memcpy(&value, in.data() + at, sizeof value);
  at += sizeof value;
  return value;
}

}  // namespace

void ReplicaRing::keep(TwoNewest& held, Snapshot snapshot) {
  held.insert(held.begin(), std::move(snapshot));
  if (held.size() > 2) held.resize(2);
}

const ReplicaRing::Snapshot* ReplicaRing::at_step(const TwoNewest& held, std::int64_t step) {
  for (const auto& snapshot : held) {
    if (snapshot.position.step == step) return &snapshot;
  }
  return nullptr;
}

void ReplicaRing::refresh(Strategy& strategy, Communicator& world,
                          const TrainingPosition& position) {
  const int n = world.size();
  if (rank_ != world.rank() || (!own_.empty() && own_.front().world_size != n)) clear();
  rank_ = world.rank();
  MemoryCheckpoint saved(n);
  strategy.save(saved);
  Snapshot mine{position, n, pack_memory_checkpoint(saved)};

  // Copies go to the next ranks of the ring, at most every other rank once.
  const int peers = std::min(replicas_, n - 1);
  std::vector<Snapshot> incoming(static_cast<std::size_t>(peers));
  for (int d = 1; d <= peers; ++d) {
    const int to = (rank_ + d) % n;
    const int from = (rank_ - d + n) % n;
    auto& copy = incoming[static_cast<std::size_t>(d - 1)];
    copy.position = position;
    copy.world_size = n;
    std::int64_t my_length = static_cast<std::int64_t>(mine.bytes.size());
    std::int64_t length = 0;
    exchange(world, view_of(std::span<std::int64_t>(&my_length, 1)), to,
             view_of(std::span<std::int64_t>(&length, 1)), from,
             kLengthTag + static_cast<std::uint32_t>(d));
    copy.bytes.resize(static_cast<std::size_t>(length));
    exchange(world, view_of(std::span<std::uint8_t>(mine.bytes)), to,
             view_of(std::span<std::uint8_t>(copy.bytes)), from,
             kBytesTag + static_cast<std::uint32_t>(d));
  }

  // Kept only once every message of this refresh is in: a refresh cut short leaves the older.
  keep(own_, std::move(mine));
  for (int d = 1; d <= peers; ++d) {
    keep(copies_[(rank_ - d + n) % n], std::move(incoming[static_cast<std::size_t>(d - 1)]));
  }
}

RecoveredState ReplicaRing::recover(Communicator& world, const std::vector<int>& previous_rank) {
  TESSERA_CHECK(previous_rank.size() == static_cast<std::size_t>(world.size()),
                "ReplicaRing::recover: previous_rank must name every rank of the new world");
  const bool survivor = previous_rank[static_cast<std::size_t>(world.rank())] >= 0;
  // What each rank has: [newest step, step before, old world size]; -1 for nothing.
  std::vector<std::int64_t> mine(3, -1);
  if (survivor && !own_.empty()) {
    mine[0] = own_.front().position.step;
    mine[1] = own_.size() > 1 ? own_[1].position.step : -1;
    mine[2] = own_.front().world_size;
  }
  const auto held = gather_i64(world, mine);
  // The newest step every survivor holds: refreshes are collective and a rank starts one only
  // after every rank finished the one before, so the oldest newest step is on every survivor.
  std::int64_t step = std::numeric_limits<std::int64_t>::max();
  std::int64_t old_size = -1;
  for (std::size_t r = 0; r < previous_rank.size(); ++r) {
    if (held[3 * r] < 0) continue;
    step = std::min(step, held[3 * r]);
    if (old_size < 0) old_size = held[3 * r + 2];
    if (old_size != held[3 * r + 2]) {
      throw TrainingError("elastic recovery: survivors hold copies of worlds of " +
                          std::to_string(old_size) + " and " + std::to_string(held[3 * r + 2]) +
                          " ranks; they did not all come from one world");
    }
  }
  if (old_size < 0) {
    throw TrainingError(
        "elastic recovery: no survivor holds a copy of the state (the world failed before its "
        "first refresh)");
  }

  // Which old ranks' state this rank can give at `step`: its own, and the copies it holds.
  const auto n_old = static_cast<std::size_t>(old_size);
  std::vector<std::int64_t> can(n_old, 0);
  if (survivor) {
    if (at_step(own_, step) != nullptr) can[static_cast<std::size_t>(rank_)] = 1;
    for (const auto& [of, snapshots] : copies_) {
      if (at_step(snapshots, step) != nullptr && static_cast<std::size_t>(of) < n_old) {
        can[static_cast<std::size_t>(of)] = 1;
      }
    }
  }
  const auto everyone_can = gather_i64(world, can);
  // The giver of each old rank's state: itself if it survived, else the first holder of a copy.
  std::vector<int> giver(n_old, -1);
  for (std::size_t r = 0; r < previous_rank.size(); ++r) {
    if (previous_rank[r] >= 0 && static_cast<std::size_t>(previous_rank[r]) < n_old &&
        everyone_can[r * n_old + static_cast<std::size_t>(previous_rank[r])] != 0) {
      giver[static_cast<std::size_t>(previous_rank[r])] = static_cast<int>(r);
    }
  }
  RecoveredState out;
  out.previous_world_size = static_cast<int>(old_size);
  for (std::size_t old = 0; old < n_old; ++old) {
    for (std::size_t r = 0; r < previous_rank.size() && giver[old] < 0; ++r) {
      if (everyone_can[r * n_old + old] != 0) giver[old] = static_cast<int>(r);
    }
    if (giver[old] < 0) out.missing.push_back(static_cast<int>(old));
  }

  // The position of `step` is on every survivor; the first survivor's is the world's.
  std::vector<std::uint8_t> given;
  const Snapshot* any = survivor ? at_step(own_, step) : nullptr;
  append_i64(given, any != nullptr ? 1 : 0);
  if (any != nullptr) {
    append_i64(given, any->position.step);
    append_i64(given, any->position.epoch);
    append_i64(given, any->position.samples);
  }
  if (out.missing.empty()) {
    for (std::size_t old = 0; old < n_old; ++old) {
      if (giver[old] != world.rank()) continue;
      const Snapshot* snapshot = static_cast<int>(old) == rank_ && survivor
                                     ? at_step(own_, step)
                                     : at_step(copies_.at(static_cast<int>(old)), step);
      append_i64(given, static_cast<std::int64_t>(old));
      append_i64(given, static_cast<std::int64_t>(snapshot->bytes.size()));
      given.insert(given.end(), snapshot->bytes.begin(), snapshot->bytes.end());
    }
  }
  const auto everyone_gave = all_gather_bytes(world, std::move(given));

  auto state = out.missing.empty() ? std::make_shared<MemoryCheckpoint>(static_cast<int>(old_size))
                                   : nullptr;
  bool have_position = false;
  for (const auto& bytes : everyone_gave) {
    std::size_t at = 0;
    if (read_i64(bytes, at) != 0) {
      const TrainingPosition position{read_i64(bytes, at), read_i64(bytes, at),
                                      read_i64(bytes, at)};
      if (!have_position) out.position = position;
      have_position = true;
    }
    while (state && at < bytes.size()) {
      (void)read_i64(bytes, at);  // the old rank: blob names and slices say whose they are
      const auto length = static_cast<std::size_t>(read_i64(bytes, at));
      if (bytes.size() - at < length) {
        throw TransportError("elastic recovery: a rank's state arrived cut", std::nullopt,
                             "elastic state exchange");
      }
      unpack_memory_checkpoint(std::span<const std::uint8_t>(bytes).subspan(at, length), *state);
      at += length;
    }
  }
  TESSERA_CHECK(have_position, "elastic recovery: no survivor sent its position");
  out.state = std::move(state);
  return out;
}

void ReplicaRing::clear() noexcept {
  own_.clear();
  copies_.clear();
  rank_ = -1;
}

}  // namespace tessera::elastic
