#include "communicator.hpp"

#include <cstring>
#include <string>
#include <vector>

#include "tessera/base/error.hpp"
#include "tessera/transport_kit/transport_support.hpp"

namespace tessera::ucx {

UcxCommunicator::UcxCommunicator(std::unique_ptr<Engine> engine) : engine_(std::move(engine)) {}

UcxCommunicator::~UcxCommunicator() = default;

void UcxCommunicator::abort(const std::string& reason) noexcept {
  engine_->abort(reason, std::nullopt);
}

std::shared_ptr<Work> UcxCommunicator::do_all_reduce(BufferView data, ReduceOp op) {
  return engine_->submit("all_reduce",
                         [=, this](Exchange& x) { run_all_reduce(x, data, op, scratch_); });
}

std::shared_ptr<Work> UcxCommunicator::do_reduce_scatter(BufferView input, BufferView output,
                                                         ReduceOp op) {
  return engine_->submit("reduce_scatter", [=, this](Exchange& x) {
    run_reduce_scatter(x, input, output, op, scratch_);
  });
}

std::shared_ptr<Work> UcxCommunicator::do_all_gather(BufferView input, BufferView output) {
  return engine_->submit("all_gather", [=](Exchange& x) { run_all_gather(x, input, output); });
}

std::shared_ptr<Work> UcxCommunicator::do_broadcast(BufferView data, int root) {
  return engine_->submit("broadcast", [=](Exchange& x) { run_broadcast(x, data, root); });
}

std::shared_ptr<Work> UcxCommunicator::do_send(BufferView data, int peer, std::uint32_t tag) {
  return engine_->submit_send(
      "send(to " + std::to_string(peer) + ", tag " + std::to_string(tag) + ")", peer, data.data,
      data.bytes(), tag);
}

std::shared_ptr<Work> UcxCommunicator::do_recv(BufferView data, int peer, std::uint32_t tag) {
  return engine_->submit_recv(
      "recv(from " + std::to_string(peer) + ", tag " + std::to_string(tag) + ")", peer, data.data,
      data.bytes(), tag);
}

std::shared_ptr<Work> UcxCommunicator::do_barrier() {
  return engine_->submit("barrier", [](Exchange& x) { run_barrier(x); });
}

std::unique_ptr<Communicator> UcxCommunicator::do_split(int color, int key) {
  // Through the engine like any collective, so that it runs after everything issued before.
  auto child = std::make_shared<std::unique_ptr<Communicator>>();
  auto work =
      engine_->submit("split", [=, this](Exchange& x) { *child = run_split(x, color, key); });
  work->wait(timeout());
  return std::move(*child);
}

// Three rounds over the parent: everyone's (color, key); then, within each new group, the
// length and bytes of each member's new worker address. The child then greets its members over
// its own worker, so it needs no store.
std::unique_ptr<Communicator> UcxCommunicator::run_split(Exchange& x, int color, int key) {
  const int me = rank();
  const int n = size();
  std::vector<std::int32_t> entries(2 * static_cast<std::size_t>(n));
  entries[2 * static_cast<std::size_t>(me)] = color;
  entries[2 * static_cast<std::size_t>(me) + 1] = key;
  for (int p = 0; p < n; ++p) {
    if (p == me) continue;
    x.recv(p, &entries[2 * static_cast<std::size_t>(p)], 2 * sizeof(std::int32_t), 0);
    x.send(p, &entries[2 * static_cast<std::size_t>(me)], 2 * sizeof(std::int32_t), 0);
  }
  x.wait_all();
  if (color < 0) return nullptr;
  std::vector<std::pair<int, int>> color_key;
  for (int r = 0; r < n; ++r)
    color_key.emplace_back(entries[2 * static_cast<std::size_t>(r)],
                           entries[2 * static_cast<std::size_t>(r) + 1]);
  const std::vector<int> members = split_group_members(color_key, me);
  const int new_size = static_cast<int>(members.size());
  int new_rank = 0;
  while (members[static_cast<std::size_t>(new_rank)] != me) ++new_rank;

  auto child =
      std::make_unique<Engine>(engine_->context(), new_rank, new_size, engine_->settings());
  const std::uint64_t my_length = child->address().size();
  std::vector<std::uint64_t> lengths(members.size());
  for (std::size_t i = 0; i < members.size(); ++i) {
    if (members[i] == me) continue;
    x.recv(members[i], &lengths[i], sizeof(std::uint64_t), 1);
    x.send(members[i], &my_length, sizeof(std::uint64_t), 1);
  }
  x.wait_all();
  std::vector<PeerInfo> peers(members.size());
  for (std::size_t i = 0; i < members.size(); ++i) {
    peers[i] = engine_->peer(members[i]);
    if (members[i] == me) {
      peers[i].address = child->address();
      continue;
    }
    peers[i].address.assign(lengths[i], '\0');
    x.recv(members[i], peers[i].address.data(), lengths[i], 2);
    x.send(members[i], child->address().data(), child->address().size(), 2);
  }
  x.wait_all();
  // The child's greeting waits for members of this group: a failure of this group meanwhile (a
  // member lost, stalled or gone, or an abort: an elastic run aborts its world when a member's
  // lease ends) ends it at once, as it would end a wait in this group's own operations, rather
  // than holding this rank until the timeout for a member that will never greet.
  const auto this_group_failed = [&](const std::vector<int>& silent) {
    const auto member = [&](int child_rank) {
      return members[static_cast<std::size_t>(child_rank)];
    };
    engine_->service();
    try {
      for (const int child_rank : silent) x.check_waiting_for(member(child_rank));
      engine_->throw_if_aborted(x.operation());
    } catch (const TransportError& e) {
      if (silent.empty()) throw;
      std::string ranks;  // by their ranks in this group
      for (const int child_rank : silent)
        ranks += (ranks.empty() ? "" : ", ") + std::to_string(member(child_rank));
      throw TransportError(std::string(e.what()) +
                               "; its new group was still waiting for rank(s) " + ranks +
                               " to greet",
                           e.peer_rank(), e.operation());
    }
  };
  child->start(std::move(peers), deadline_after(timeout()), this_group_failed);
  return std::make_unique<UcxCommunicator>(std::move(child));
}

}  // namespace tessera::ucx
