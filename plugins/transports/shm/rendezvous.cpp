#include <unistd.h>

#include <string>
#include <vector>

#include "communicator.hpp"
#include "futex.hpp"
#include "tessera/base/error.hpp"

namespace tessera::shm {

namespace {

// Blocks until every rank has written its pid into the segment.
void await_attached(const Segment& segment, int size, Deadline deadline) {
  Header& header = segment.header();
  for (;;) {
    const std::uint32_t seen = header.epoch.load();
    if (header.attached.load() == static_cast<std::uint32_t>(size)) return;
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
      futex_wait(header.epoch, seen, std::chrono::milliseconds(50));
    header.sleepers.fetch_sub(1);
  }
}

}  // namespace

std::unique_ptr<ShmCommunicator> connect_group(std::shared_ptr<Store> store, int rank, int size,
                                               const Settings& settings, Duration timeout) {
  const Deadline deadline = deadline_after(timeout);
  const std::size_t staging_bytes = static_cast<std::size_t>(size) * settings.chunk_size;
  Segment::require_room(size, staging_bytes, settings.p2p_chunk_size);
  // Each rank counts its own connects through this store, so a store reused for a second
  // world never hands out the first world's (already unlinked) segment name.
  const auto generation = store->add("shm/connects/rank" + std::to_string(rank), 1);
  const std::string key = "shm/segment/" + std::to_string(generation);
  Segment segment;
  if (rank == 0) {
    segment = Segment::create(size, staging_bytes, settings.p2p_chunk_size);
    store->set(key, segment.name());
  } else {
    segment = Segment::open(store->get(key, timeout), size);
  }
  segment.rank_slot(rank).progress.store(released(kFirstStep - 1));
  segment.rank_slot(rank).pid.store(::getpid());
  segment.header().attached.fetch_add(1);
  segment.header().epoch.fetch_add(1);
  futex_wake_all(segment.header().epoch);
  await_attached(segment, size, deadline);
  segment.unlink();
  if (rank == 0) store->remove(key);

  std::vector<pid_t> pids;
  for (int r = 0; r < size; ++r) pids.push_back(segment.rank_slot(r).pid.load());
  PeerWatch watch(pids, rank);
  auto group = std::make_shared<Group>(std::move(segment), rank, size, settings, std::move(watch));
  return std::make_unique<ShmCommunicator>(std::move(group), std::move(store));
}

}  // namespace tessera::shm
