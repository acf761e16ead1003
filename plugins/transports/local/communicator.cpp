#include "communicator.hpp"

#include <cstring>
#include <utility>

#include "tessera/base/error.hpp"

namespace tessera::local {

LocalCommunicator::LocalCommunicator(std::shared_ptr<LocalGroup> group, int rank, Duration timeout)
    : group_(std::move(group)),
      rank_(rank),
      timeout_(timeout),
      queue_(timeout, [weak = std::weak_ptr<LocalGroup>(group_)](const std::string& reason) {
        if (auto alive = weak.lock()) alive->abort(reason);
      }) {}

LocalCommunicator::~LocalCommunicator() {
  queue_.shutdown(std::make_exception_ptr(
      TransportError("local: rank " + std::to_string(rank_) +
                         " destroyed its communicator with this operation pending",
                     rank_, "destroy")));
}

void LocalCommunicator::abort(const std::string& reason) noexcept {
  group_->abort(reason);
}

OpContext LocalCommunicator::context(std::string operation) const {
  return {std::move(operation), rank_, deadline_after(timeout_), timeout_};
}

std::shared_ptr<Work> LocalCommunicator::submit(std::string operation,
                                                std::function<void(const OpContext&)> body) {
  // The deadline starts when the body starts, not at issue: queued operations wait their turn.
  return queue_.submit(operation, [this, operation, body = std::move(body)] {
    const OpContext op_context = context(operation);
    group_->check_alive(op_context);
    body(op_context);
  });
}

std::shared_ptr<Work> LocalCommunicator::do_all_reduce(BufferView data, ReduceOp op) {
  return submit("all_reduce", [=, this](const OpContext& c) { run_all_reduce(c, data, op); });
}

std::shared_ptr<Work> LocalCommunicator::do_reduce_scatter(BufferView input, BufferView output,
                                                           ReduceOp op) {
  return submit("reduce_scatter",
                [=, this](const OpContext& c) { run_reduce_scatter(c, input, output, op); });
}

std::shared_ptr<Work> LocalCommunicator::do_all_gather(BufferView input, BufferView output) {
  return submit("all_gather", [=, this](const OpContext& c) { run_all_gather(c, input, output); });
}

std::shared_ptr<Work> LocalCommunicator::do_broadcast(BufferView data, int root) {
  return submit("broadcast", [=, this](const OpContext& c) { run_broadcast(c, data, root); });
}

std::shared_ptr<Work> LocalCommunicator::do_send(BufferView data, int peer, std::uint32_t tag) {
  const std::string name = "send(to " + std::to_string(peer) + ", tag " + std::to_string(tag) + ")";
  return submit(name, [=, this](const OpContext&) {
    Message message{data.dtype, data.count, std::vector<std::byte>(data.bytes())};
    if (data.count != 0) std::memcpy(message.payload.data(), data.data, data.bytes());
    group_->post(rank_, peer, tag, std::move(message));
  });
}

std::shared_ptr<Work> LocalCommunicator::do_recv(BufferView data, int peer, std::uint32_t tag) {
  const std::string name =
      "recv(from " + std::to_string(peer) + ", tag " + std::to_string(tag) + ")";
  return submit(name, [=, this](const OpContext& c) { run_recv(c, data, peer, tag); });
}

std::shared_ptr<Work> LocalCommunicator::do_barrier() {
  return submit("barrier", [this](const OpContext& c) {
    Contribution contribution;
    contribution.signature.operation = "barrier";
    enter(c, contribution);
    group_->arrive_and_wait(c);  // peers may still be comparing signatures in our slot
  });
}

std::unique_ptr<Communicator> LocalCommunicator::do_split(int color, int key) {
  // Through the queue like any collective, so that it runs after everything issued before it.
  auto child = std::make_shared<std::unique_ptr<Communicator>>();
  auto work = submit("split", [=, this](const OpContext& c) { *child = run_split(c, color, key); });
  work->wait(timeout_);
  return std::move(*child);
}

}  // namespace tessera::local
