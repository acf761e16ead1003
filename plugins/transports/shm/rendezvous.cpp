#include <unistd.h>

#include <algorithm>
#include <string>
#include <string_view>
#include <vector>

#include "communicator.hpp"
#include "futex.hpp"
#include "tessera/base/error.hpp"

namespace tessera::shm {

namespace {

// What rank 0 publishes under the segment key instead of a name (names start with '/') once
// the world cannot come together: "refused <the rank it is about> <why>", or "no room 0 <why>"
// when /dev/shm cannot hold the segment. Every rank still to read the key then fails at once,
// naming that rank, instead of waiting out its timeout; a lack of room as OutOfMemory on every
// rank, as on rank 0 (no peer failed: whoever retries meets the same refusal).
constexpr std::string_view kRefusedPrefix = "refused ";
constexpr std::string_view kNoRoomPrefix = "no room ";

// Never throws: where the store is gone too the others time out, and the caller's own error
// matters more.
void publish_refusal(Store& store, const std::string& key, int about, const std::string& why,
                     std::string_view prefix = kRefusedPrefix) noexcept {
  try {
    store.set(key, std::string(prefix) + std::to_string(about) + " " + why);
  } catch (...) {
  }
}

[[noreturn]] void throw_refused(int rank, int size, int about, const std::string& why,
                                bool no_room = false) {
  const std::string message =
      "shm connect (rank " + std::to_string(rank) + " of " + std::to_string(size) + "): " + why;
  if (no_room) throw OutOfMemory(message);
  throw TransportError(message, about, "connect");
}

// Blocks until every rank has written its pid into the segment. Fails at once, naming it,
// when a rank records in the segment that it gave up (see Segment::open); rank 0 then also
// tells the ranks yet to read the key. A peer `peers_gone` names is recorded in the segment like
// a rank's own failure, so that the ranks already attached fail with it too.
void await_attached(const Segment& segment, Store& store, const std::string& key, int rank,
                    int size, Deadline deadline, const PeersCheck& peers_gone) {
  Header& header = segment.header();
  for (;;) {
    const std::uint32_t seen = header.epoch.load();
    if (header.attached.load() == static_cast<std::uint32_t>(size)) return;
    if (peers_gone) {
      if (const auto gone = peers_gone()) {
        segment.record_failure(FailureKind::aborted, gone->rank, gone->why);
      }
    }
    const auto failure = static_cast<FailureKind>(header.failure.load(std::memory_order_acquire));
    if (failure == FailureKind::died || failure == FailureKind::aborted) {
      if (rank == 0) publish_refusal(store, key, header.failed_rank, header.failure_reason);
      throw_refused(rank, size, header.failed_rank, header.failure_reason);
    }
    const auto now = std::chrono::steady_clock::now();
    if (now >= deadline) {
      std::string missing;
      for (int r = 0; r < size; ++r)
        if (segment.rank_slot(r).pid.load() == 0)
          missing += (missing.empty() ? "" : ", ") + std::to_string(r);
      throw Timeout("shm connect: ranks " + missing + " did not attach to " + segment.name());
    }
    header.sleepers.fetch_add(1);
    if (header.attached.load() != static_cast<std::uint32_t>(size))
      futex_wait(header.epoch, seen, kPeersCheckPeriod);
    header.sleepers.fetch_sub(1);
  }
}

// Rank 0: creates the segment and publishes its name, or why it could not.
Segment create_and_publish(Store& store, const std::string& key, int size,
                           std::size_t staging_bytes, const Settings& settings) {
  Segment segment;
  const auto why = [](const std::exception& e) {
    return "rank 0 (pid " + std::to_string(::getpid()) +
           ") could not create the world's shared memory: " + e.what();
  };
  try {
    segment = Segment::create(size, staging_bytes, settings.p2p_chunk_size);
  } catch (const OutOfMemory& e) {
    publish_refusal(store, key, 0, why(e), kNoRoomPrefix);
    throw;
  } catch (const std::exception& e) {
    publish_refusal(store, key, 0, why(e));
    throw;
  }
  store.set(key, segment.name());
  return segment;
}

// The value of `key` once it is there, as store.get; with `peers_gone`, asked between waits of
// kPeersCheckPeriod, a peer it names ends the wait (as a refusal about that rank).
std::string await_key(Store& store, const std::string& key, int rank, int size, Deadline deadline,
                      const PeersCheck& peers_gone) {
  const auto left = [&] {
    return std::max(Duration(0), std::chrono::duration_cast<Duration>(
                                     deadline - std::chrono::steady_clock::now()));
  };
  if (!peers_gone) return store.get(key, left());
  for (;;) {
    try {
      return store.get(key, std::min(left(), kPeersCheckPeriod));
    } catch (const Timeout&) {
      if (left() <= Duration(0)) throw;
    }
    if (const auto gone = peers_gone()) throw_refused(rank, size, gone->rank, gone->why);
  }
}

// The other ranks: maps the segment rank 0 published, or fails as its refusal says.
Segment open_published(Store& store, const std::string& key, int rank, int size, Deadline deadline,
                       const PeersCheck& peers_gone) {
  // Throws when `value` is a refusal, unless it is about this rank (then this rank's own
  // error, being thrown, says it better).
  const auto throw_if_refused = [&](const std::string& value) {
    const bool no_room = value.rfind(kNoRoomPrefix, 0) == 0;
    if (!no_room && value.rfind(kRefusedPrefix, 0) != 0) return;
    const auto rest = value.substr((no_room ? kNoRoomPrefix : kRefusedPrefix).size());
    const auto space = rest.find(' ');
    const int about = std::stoi(rest.substr(0, space));
    if (about != rank) throw_refused(rank, size, about, rest.substr(space + 1), no_room);
  };
  const std::string name = await_key(store, key, rank, size, deadline, peers_gone);
  throw_if_refused(name);
  try {
    return Segment::open(name, rank, size);
  } catch (const TransportError&) {
    // Rank 0 may have given up, and removed the segment, between the read and the open: then
    // its refusal says why.
    if (store.check(key)) throw_if_refused(store.get(key, kPeersCheckPeriod));
    throw;
  }
}

}  // namespace

std::unique_ptr<ShmCommunicator> connect_group(std::shared_ptr<Store> store, int rank, int size,
                                               const Settings& settings, Duration timeout,
                                               const PeersCheck& peers_gone) {
  const Deadline deadline = deadline_after(timeout);
  const std::size_t staging_bytes = static_cast<std::size_t>(size) * settings.chunk_size;
  // Each rank counts its own connects through this store, so a store reused for a second
  // world never hands out the first world's (already unlinked) segment name.
  const auto generation = store->add("shm/connects/rank" + std::to_string(rank), 1);
  const std::string key = "shm/segment/" + std::to_string(generation);
  // Only rank 0 needs room in /dev/shm: it allocates the whole segment; the others map pages
  // already there.
  Segment segment = rank == 0 ? create_and_publish(*store, key, size, staging_bytes, settings)
                              : open_published(*store, key, rank, size, deadline, peers_gone);
  segment.rank_slot(rank).progress.store(released(kFirstStep - 1));
  segment.rank_slot(rank).pid.store(::getpid());
  segment.header().attached.fetch_add(1);
  segment.header().epoch.fetch_add(1);
  futex_wake_all(segment.header().epoch);
  await_attached(segment, *store, key, rank, size, deadline, peers_gone);
  segment.unlink();
  if (rank == 0) store->remove(key);

  std::vector<pid_t> pids;
  for (int r = 0; r < size; ++r) pids.push_back(segment.rank_slot(r).pid.load());
  PeerWatch watch(pids, rank);
  auto group = std::make_shared<Group>(std::move(segment), rank, size, settings, std::move(watch));
  return std::make_unique<ShmCommunicator>(std::move(group), std::move(store));
}

}  // namespace tessera::shm
