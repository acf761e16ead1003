#pragma once
// ShmCommunicator: the Communicator of one group of processes (or threads) on this host.

#include <functional>
#include <memory>
#include <optional>
#include <string>

#include "group.hpp"
#include "op_queue.hpp"
#include "tessera/plugin/communicator.hpp"
#include "tessera/plugin/store.hpp"

namespace tessera::shm {

class ShmCommunicator final : public Communicator {
 public:
  // `store` is the group's own namespace; split() derives its children's from it.
  ShmCommunicator(std::shared_ptr<Group> group, std::shared_ptr<Store> store);
  ~ShmCommunicator() override;
  ShmCommunicator(const ShmCommunicator&) = delete;
  ShmCommunicator& operator=(const ShmCommunicator&) = delete;

  [[nodiscard]] int rank() const noexcept override { return group_->rank(); }
  [[nodiscard]] int size() const noexcept override { return group_->size(); }
  [[nodiscard]] Duration timeout() const noexcept override { return group_->settings().timeout; }
  void abort(const std::string& reason) noexcept override;

 protected:
  std::shared_ptr<Work> do_all_reduce(BufferView data, ReduceOp op) override;
  std::shared_ptr<Work> do_reduce_scatter(BufferView input, BufferView output,
                                          ReduceOp op) override;
  std::shared_ptr<Work> do_all_gather(BufferView input, BufferView output) override;
  std::shared_ptr<Work> do_broadcast(BufferView data, int root) override;
  std::shared_ptr<Work> do_send(BufferView data, int peer, std::uint32_t tag) override;
  std::shared_ptr<Work> do_recv(BufferView data, int peer, std::uint32_t tag) override;
  std::shared_ptr<Work> do_barrier() override;
  std::unique_ptr<Communicator> do_split(int color, int key) override;

 private:
  std::shared_ptr<Work> transfer(bool is_send, BufferView data, int peer, std::uint32_t tag);

  const std::shared_ptr<Group> group_;
  const std::shared_ptr<OpQueue> queue_;
  const std::shared_ptr<Store> store_;
  int splits_ = 0;
};

// A rank of the group being connected that will never attach, and why (its process died, or
// a group it belongs to failed).
struct PeerGone {
  int rank = 0;
  std::string why;
};
// Asked while a connect waits for its peers: a peer that will never come, if one is known.
using PeersCheck = std::function<std::optional<PeerGone>()>;

// Rendezvous: rank 0 creates the segment and publishes its name in `store`; the others map
// it; once all are attached every rank unlinks the name, so that nothing is left in /dev/shm
// however the processes end. Blocks until all `size` ranks have attached or `timeout` passes
// (then throws Timeout naming the missing ranks). With `peers_gone`, asked about every
// kPeersCheckPeriod of the wait, a peer it names ends the wait at once: TransportError naming
// that rank on every rank still connecting, instead of a Timeout at the end.
std::unique_ptr<ShmCommunicator> connect_group(std::shared_ptr<Store> store, int rank, int size,
                                               const Settings& settings, Duration timeout,
                                               const PeersCheck& peers_gone = {});
inline constexpr Duration kPeersCheckPeriod{50};

}  // namespace tessera::shm
