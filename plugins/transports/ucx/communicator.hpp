#pragma once
// UcxCommunicator: one rank's handle on a group connected over UCX. Issue-time checks here;
// everything else happens on the Engine's thread (engine.hpp, collectives.hpp).

#include <memory>
#include <string>

#include "collectives.hpp"
#include "engine.hpp"
#include "tessera/plugin/communicator.hpp"

namespace tessera::ucx {

class UcxCommunicator final : public Communicator {
 public:
  explicit UcxCommunicator(std::unique_ptr<Engine> engine);
  ~UcxCommunicator() override;

  [[nodiscard]] int rank() const noexcept override { return engine_->rank(); }
  [[nodiscard]] int size() const noexcept override { return engine_->size(); }
  [[nodiscard]] Duration timeout() const noexcept override { return engine_->settings().timeout; }
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
  std::unique_ptr<Communicator> run_split(Exchange& exchange, int color, int key);

  Scratch scratch_;                 // touched by the engine thread only
  std::unique_ptr<Engine> engine_;  // last: its thread must stop before scratch_ dies
};

}  // namespace tessera::ucx
