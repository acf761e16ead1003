#pragma once
// Communicator: one group of ranks and the operations among them.

#include <cstdint>
#include <memory>
#include <string>

#include "tessera/base/buffer_view.hpp"
#include "tessera/plugin/plugin_object.hpp"
#include "tessera/plugin/reduce_op.hpp"
#include "tessera/plugin/work.hpp"

namespace tessera {

// Ordering: every rank issues the same collectives in the same order; operations of one
// communicator run one after another in issue order (a send/recv pair is matched by peer and
// tag). Different communicators (e.g. from split) progress independently.
//
// Asynchrony: each operation returns at once with a Work; buffers must stay valid until it
// completes. Results are bitwise identical on every rank and from run to run (fixed reduction
// order, see tessera/transport_kit/reduce.hpp).
//
// Thread-safety: issuing operations from several threads at once on one communicator is not
// allowed (their order would be undefined); abort() and the Work methods are thread-safe.
//
// Devices: buffers live where moves() allows (the host for every CPU transport); the Work of an
// operation on device buffers is device work (Work::on_device, Work::wait_on_stream).
//
// Errors: argument mistakes (a buffer on a device this communicator does not move) throw
// InvalidArgument at issue time. Failures at run time (a peer
// died, abort, timeout) surface through Work::wait as TransportError naming the peer and the
// operation; after one, every pending and later operation fails the same way.
//
// The public methods validate arguments and then call the do_* hooks a transport implements.
class Communicator : public PluginObject {
 public:
  [[nodiscard]] virtual int rank() const noexcept = 0;
  [[nodiscard]] virtual int size() const noexcept = 0;
  // The default deadline of Work::wait() and of blocking calls on this communicator.
  [[nodiscard]] virtual Duration timeout() const noexcept = 0;
  // Whether operations may read and write buffers on `device`. Every operation checks its
  // buffers against it at issue time; host memory only unless a transport says otherwise.
  [[nodiscard]] virtual bool moves(Device device) const noexcept { return device == Device::cpu(); }

  // In place: every rank's `data` ends as the reduction over all ranks.
  std::shared_ptr<Work> all_reduce(BufferView data, ReduceOp op);
  // input holds size() * output.count elements; rank r receives the reduction of block r.
  std::shared_ptr<Work> reduce_scatter(BufferView input, BufferView output, ReduceOp op);
  // output holds size() * input.count elements; block r is rank r's input.
  std::shared_ptr<Work> all_gather(BufferView input, BufferView output);
  // root's data is copied into every rank's data.
  std::shared_ptr<Work> broadcast(BufferView data, int root);
  // Point to point; a recv matches the send from `peer` with the same tag, in order.
  std::shared_ptr<Work> send(BufferView data, int peer, std::uint32_t tag);
  std::shared_ptr<Work> recv(BufferView data, int peer, std::uint32_t tag);
  // Completes once every rank has issued its barrier.
  std::shared_ptr<Work> barrier();

  // Collective over this communicator: ranks with the same color form a new communicator,
  // ordered by (key, old rank). color < 0 opts out and yields nullptr. Blocks until the new
  // group is connected. The child may outlive its parent.
  [[nodiscard]] std::shared_ptr<Communicator> split(int color, int key);

  // Fails every pending and future operation with TransportError(reason). Thread-safe,
  // idempotent, non-blocking; the one way to unblock a rank stuck on a dead group (elastic).
  virtual void abort(const std::string& reason) noexcept = 0;

 protected:
  virtual std::shared_ptr<Work> do_all_reduce(BufferView data, ReduceOp op) = 0;
  virtual std::shared_ptr<Work> do_reduce_scatter(BufferView input, BufferView output,
                                                  ReduceOp op) = 0;
  virtual std::shared_ptr<Work> do_all_gather(BufferView input, BufferView output) = 0;
  virtual std::shared_ptr<Work> do_broadcast(BufferView data, int root) = 0;
  virtual std::shared_ptr<Work> do_send(BufferView data, int peer, std::uint32_t tag) = 0;
  virtual std::shared_ptr<Work> do_recv(BufferView data, int peer, std::uint32_t tag) = 0;
  virtual std::shared_ptr<Work> do_barrier() = 0;
  // Returns nullptr for color < 0. Called on every rank, including opted-out ones.
  virtual std::unique_ptr<Communicator> do_split(int color, int key) = 0;

 private:
  static std::shared_ptr<Work> checked(std::shared_ptr<Work> work);
  // Throws InvalidArgument for a buffer on a device this transport does not move, or a null
  // buffer of a non-zero count.
  void check_buffer(const char* operation, const BufferView& buffer) const;
};

}  // namespace tessera
