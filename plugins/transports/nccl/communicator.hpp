#pragma once
// NcclCommunicator: one rank's handle on an NCCL communicator. Buffers live on the rank's GPU;
// every operation is ordered after the work already queued on that GPU's default stream and
// runs on the communicator's own stream (nccl_comm.hpp).

#include <memory>
#include <string>

#include "nccl_comm.hpp"
#include "tessera/plugin/communicator.hpp"
#include "transport.hpp"

namespace tessera::nccl {

class NcclCommunicator final : public Communicator {
 public:
  NcclCommunicator(std::shared_ptr<NcclComm> comm, Settings settings);
  ~NcclCommunicator() override;

  [[nodiscard]] int rank() const noexcept override { return comm_->rank(); }
  [[nodiscard]] int size() const noexcept override { return comm_->size(); }
  [[nodiscard]] Duration timeout() const noexcept override { return settings_.timeout; }
  // This rank's GPU only.
  [[nodiscard]] bool moves(Device device) const noexcept override {
    return device == Device::cuda(comm_->ordinal());
  }
  void abort(const std::string& reason) noexcept override { comm_->abort(reason); }

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
  std::shared_ptr<NcclComm> comm_;
  Settings settings_;
  void* barrier_word_ = nullptr;  // one int32 on the GPU that barrier() all-reduces
};

}  // namespace tessera::nccl
