#include "p2p.hpp"

#include <algorithm>
#include <cstring>

#include "tessera/base/error.hpp"

namespace tessera::shm {

namespace {

constexpr std::uint64_t kSlots = 2;

bool has_free_slot(const ChannelControl& channel) noexcept {
  return channel.sent.load(std::memory_order_relaxed) -
             channel.received.load(std::memory_order_acquire) <
         kSlots;
}

// The first unfinished send to t.peer in batch order: sends to one peer go out one at a time,
// so that their chunks never interleave on the channel.
bool is_first_send_to_peer(const std::vector<Transfer>& active, const Transfer& t) noexcept {
  for (const Transfer& other : active) {
    if (&other == &t) return true;
    if (other.is_send && other.peer == t.peer && !other.finished()) return false;
  }
  return true;
}

// The index of the receive that the chunk at the head of peer's channel belongs to, or -1.
int match_head(const Group& group, const std::vector<Transfer>& active, int peer) noexcept {
  const ChannelControl& channel = group.segment().channel(peer, group.rank());
  const std::uint64_t head = channel.received.load(std::memory_order_relaxed);
  if (channel.sent.load(std::memory_order_acquire) == head) return -1;
  const auto* chunk =
      reinterpret_cast<const ChunkHeader*>(group.segment().channel_slot(peer, group.rank(), head));
  for (std::size_t i = 0; i < active.size(); ++i) {
    const Transfer& t = active[i];
    if (t.is_send || t.peer != peer || t.finished()) continue;
    if (chunk->offset == 0 ? (!t.started && t.tag == chunk->tag) : t.started)
      return static_cast<int>(i);
  }
  return -1;
}

bool advance_send(Group& group, Transfer& t) {
  bool moved = false;
  ChannelControl& channel = group.segment().channel(group.rank(), t.peer);
  const std::size_t capacity = group.segment().channel_bytes();
  while (!t.finished() && has_free_slot(channel)) {
    const std::uint64_t slot = channel.sent.load(std::memory_order_relaxed);
    std::byte* base = group.segment().channel_slot(group.rank(), t.peer, slot);
    const std::size_t length = std::min(capacity, t.bytes - t.moved);
    auto* chunk = reinterpret_cast<ChunkHeader*>(base);
    chunk->tag = t.tag;
    chunk->message_bytes = t.bytes;
    chunk->offset = t.moved;
    chunk->length = length;
    if (length > 0) std::memcpy(base + sizeof(ChunkHeader), t.data + t.moved, length);
    t.moved += length;
    t.started = true;
    channel.sent.store(slot + 1);
    group.notify();
    moved = true;
  }
  return moved;
}

bool advance_receives_from(Group& group, std::vector<Transfer>& active, int peer) {
  bool moved = false;
  ChannelControl& channel = group.segment().channel(peer, group.rank());
  for (int index; (index = match_head(group, active, peer)) >= 0;) {
    Transfer* t = &active[static_cast<std::size_t>(index)];
    const std::uint64_t slot = channel.received.load(std::memory_order_relaxed);
    const std::byte* base = group.segment().channel_slot(peer, group.rank(), slot);
    const auto* chunk = reinterpret_cast<const ChunkHeader*>(base);
    if (chunk->message_bytes != t->bytes) {
      const std::string reason = "recv(tag " + std::to_string(t->tag) + ") of " +
                                 std::to_string(t->bytes) + " bytes matched a send of " +
                                 std::to_string(chunk->message_bytes) + " bytes from rank " +
                                 std::to_string(peer);
      group.fail(FailureKind::aborted, peer, reason, true);
      group.throw_failure(t->work->operation());
    }
    if (chunk->length > 0)
      std::memcpy(t->data + chunk->offset, base + sizeof(ChunkHeader), chunk->length);
    t->moved += chunk->length;
    t->started = true;
    channel.received.store(slot + 1);
    group.notify();
    moved = true;
  }
  return moved;
}

}  // namespace

bool advance_transfers(Group& group, std::vector<Transfer>& active) {
  bool moved = false;
  for (Transfer& t : active) {
    if (t.is_send && !t.finished() && is_first_send_to_peer(active, t))
      moved |= advance_send(group, t);
  }
  std::vector<int> peers;
  for (const Transfer& t : active) {
    if (!t.is_send && !t.finished() && std::find(peers.begin(), peers.end(), t.peer) == peers.end())
      peers.push_back(t.peer);
  }
  for (int peer : peers) moved |= advance_receives_from(group, active, peer);
  return moved;
}

int transfers_blocked_on(const Group& group, const std::vector<Transfer>& active) noexcept {
  int blame = -1;
  for (const Transfer& t : active) {
    if (t.finished()) continue;
    if (t.is_send) {
      if (is_first_send_to_peer(active, t) &&
          has_free_slot(group.segment().channel(group.rank(), t.peer)))
        return -1;
    } else if (match_head(group, active, t.peer) >= 0) {
      return -1;
    }
    if (blame < 0) blame = t.peer;
  }
  return blame;
}

}  // namespace tessera::shm
