#include "communicator.hpp"

#include <algorithm>
#include <cstring>
#include <vector>

#include "collectives.hpp"
#include "tessera/base/error.hpp"
#include "tessera/transport_kit/transport_support.hpp"

namespace tessera::shm {

ShmCommunicator::ShmCommunicator(std::shared_ptr<Group> group, std::shared_ptr<Store> store)
    : group_(std::move(group)),
      queue_(std::make_shared<OpQueue>(group_)),
      store_(std::move(store)) {
  queue_->start();
}

ShmCommunicator::~ShmCommunicator() {
  queue_->shutdown("communicator destroyed");
}

void ShmCommunicator::abort(const std::string& reason) noexcept {
  try {
    const std::string why = "rank " + std::to_string(rank()) + " aborted: " + reason;
    group_->fail(FailureKind::aborted, rank(), why, true);
  } catch (...) {
    group_->fail(FailureKind::aborted, rank(), "aborted", true);
  }
}

std::shared_ptr<Work> ShmCommunicator::do_all_reduce(BufferView data, ReduceOp op) {
  return queue_->submit(queue_, "all_reduce",
                        [group = group_.get(), data, op] { shm::all_reduce(*group, data, op); });
}

std::shared_ptr<Work> ShmCommunicator::do_reduce_scatter(BufferView input, BufferView output,
                                                         ReduceOp op) {
  return queue_->submit(queue_, "reduce_scatter", [group = group_.get(), input, output, op] {
    shm::reduce_scatter(*group, input, output, op);
  });
}

std::shared_ptr<Work> ShmCommunicator::do_all_gather(BufferView input, BufferView output) {
  return queue_->submit(queue_, "all_gather", [group = group_.get(), input, output] {
    shm::all_gather(*group, input, output);
  });
}

std::shared_ptr<Work> ShmCommunicator::do_broadcast(BufferView data, int root) {
  return queue_->submit(queue_, "broadcast",
                        [group = group_.get(), data, root] { shm::broadcast(*group, data, root); });
}

std::shared_ptr<Work> ShmCommunicator::do_barrier() {
  return queue_->submit(queue_, "barrier", [group = group_.get()] { shm::barrier(*group); });
}

std::shared_ptr<Work> ShmCommunicator::do_send(BufferView data, int peer, std::uint32_t tag) {
  return transfer(true, data, peer, tag);
}

std::shared_ptr<Work> ShmCommunicator::do_recv(BufferView data, int peer, std::uint32_t tag) {
  return transfer(false, data, peer, tag);
}

std::shared_ptr<Work> ShmCommunicator::transfer(bool is_send, BufferView data, int peer,
                                                std::uint32_t tag) {
  Transfer t;
  t.is_send = is_send;
  t.peer = peer;
  t.tag = tag;
  t.data = data.byte_data();
  t.bytes = data.bytes();
  return queue_->submit_transfer(queue_, is_send ? "send" : "recv", std::move(t));
}

namespace {

// The child's connect waits for ranks of this group: one whose process exits, or a failure of
// this group (a peer's, or an abort: an elastic run aborts its world when a member's lease
// ends), ends that wait at once, as it would end a wait in this group's own operations.
PeersCheck child_members_gone(std::shared_ptr<Group> parent, std::vector<int> members) {
  return [parent = std::move(parent), members = std::move(members)]() -> std::optional<PeerGone> {
    try {
      parent->throw_if_failed_or_exited(members, "split");
      return std::nullopt;
    } catch (const TransportError& e) {
      // The child's rank of the one the failure is about; this rank's own when it is none of
      // the child's members.
      const int about = e.peer_rank().value_or(parent->rank());
      const auto it = std::find(members.begin(), members.end(), about);
      const auto own = std::find(members.begin(), members.end(), parent->rank());
      return PeerGone{static_cast<int>((it != members.end() ? it : own) - members.begin()),
                      std::string("the group it splits from failed: ") + e.what()};
    }
  };
}

}  // namespace

// The (color, key) exchange is an all_gather on this group, queued behind what was issued
// before; the child then meets in a store namespace unique to this split and color.
std::unique_ptr<Communicator> ShmCommunicator::do_split(int color, int key) {
  const int split_index = splits_++;
  // Shared with the body: if wait() times out, the body may still be running.
  auto mine = std::make_shared<std::vector<std::int32_t>>(std::vector<std::int32_t>{color, key});
  auto all = std::make_shared<std::vector<std::int32_t>>(2 * static_cast<std::size_t>(size()));
  queue_
      ->submit(queue_, "split",
               [mine, all, group = group_.get()] {
                 shm::all_gather(*group, view_of(std::span(*mine)), view_of(std::span(*all)));
               })
      ->wait();
  std::vector<std::pair<int, int>> color_key;
  for (std::size_t i = 0; i < all->size(); i += 2) color_key.emplace_back((*all)[i], (*all)[i + 1]);
  const std::vector<int> members = split_group_members(color_key, rank());
  if (members.empty()) return nullptr;
  int new_rank = 0;
  while (members[static_cast<std::size_t>(new_rank)] != rank()) ++new_rank;
  auto child_store = std::make_shared<PrefixStore>(
      "split" + std::to_string(split_index) + "/color" + std::to_string(color), store_);
  const int child_size = static_cast<int>(members.size());
  return connect_group(std::move(child_store), new_rank, child_size, group_->settings(),
                       group_->settings().timeout, child_members_gone(group_, members));
}

}  // namespace tessera::shm
