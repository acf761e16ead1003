#pragma once
// LocalCommunicator: one rank's handle on a LocalGroup. Operations run on the communicator's
// OperationQueue worker in issue order; each body is a few phases separated by group barriers
// (collectives.cpp).

#include <memory>
#include <string>
#include <vector>

#include "group.hpp"
#include "tessera/plugin/communicator.hpp"
#include "tessera/transport_kit/transport_support.hpp"

namespace tessera::local {

class LocalCommunicator final : public Communicator {
 public:
  LocalCommunicator(std::shared_ptr<LocalGroup> group, int rank, Duration timeout);
  ~LocalCommunicator() override;

  [[nodiscard]] int rank() const noexcept override { return rank_; }
  [[nodiscard]] int size() const noexcept override { return group_->size(); }
  [[nodiscard]] Duration timeout() const noexcept override { return timeout_; }
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
  // The operation bodies, run on the queue's worker thread.
  void run_all_reduce(const OpContext& context, BufferView data, ReduceOp op);
  void run_reduce_scatter(const OpContext& context, BufferView input, BufferView output,
                          ReduceOp op);
  void run_all_gather(const OpContext& context, BufferView input, BufferView output);
  void run_broadcast(const OpContext& context, BufferView data, int root);
  void run_recv(const OpContext& context, BufferView data, int peer, std::uint32_t tag);
  std::unique_ptr<Communicator> run_split(const OpContext& context, int color, int key);

  // Publishes this rank's contribution and waits until every rank has; then checks that all
  // issued the same operation.
  void enter(const OpContext& context, const Contribution& contribution);
  // The reduction of elements [offset, offset + n) over every rank's input, in rank order.
  void reduce_ranks(std::byte* out, std::size_t offset, std::size_t n, DType dtype, ReduceOp op);
  [[nodiscard]] OpContext context(std::string operation) const;
  std::shared_ptr<Work> submit(std::string operation, std::function<void(const OpContext&)> body);

  std::shared_ptr<LocalGroup> group_;
  const int rank_;
  const Duration timeout_;
  std::vector<std::byte> scratch_;  // touched by the worker thread only
  OperationQueue queue_;            // last: its worker must stop before the members above die
};

}  // namespace tessera::local
