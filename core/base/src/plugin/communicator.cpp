#include "tessera/plugin/communicator.hpp"

#include <string>

#include "tessera/base/error.hpp"

namespace tessera {

namespace {

bool overlaps(const BufferView& a, const BufferView& b) {
  const auto* a_end = a.byte_data() + a.bytes();
  const auto* b_end = b.byte_data() + b.bytes();
  return a.bytes() != 0 && b.bytes() != 0 && a.byte_data() < b_end && b.byte_data() < a_end;
}

std::string describe(const BufferView& v) {
  return std::to_string(v.count) + " x " + std::string(dtype_name(v.dtype));
}

}  // namespace

// Every Work leaves through here: a transport that returns none broke its contract, and the
// caller would dereference null.
std::shared_ptr<Work> Communicator::checked(std::shared_ptr<Work> work) {
  TESSERA_CHECK(work != nullptr, "transport returned no Work");
  return work;
}

// Checked here for every transport, so that none repeats it (docs/architecture.md).
void Communicator::check_buffer(const char* operation, const BufferView& buffer) const {
  if (!moves(buffer.device)) {
    throw InvalidArgument(std::string(operation) + ": a buffer on " + to_string(buffer.device) +
                          ", which this transport does not move: keep communication buffers in "
                          "host memory, or use a transport for that device");
  }
  TESSERA_CHECK(buffer.data != nullptr || buffer.count == 0,
                std::string(operation) + ": null buffer of " + describe(buffer));
}

std::shared_ptr<Work> Communicator::all_reduce(BufferView data, ReduceOp op) {
  check_buffer("all_reduce", data);
  return checked(do_all_reduce(data, op));
}

std::shared_ptr<Work> Communicator::reduce_scatter(BufferView input, BufferView output,
                                                   ReduceOp op) {
  check_buffer("reduce_scatter", input);
  check_buffer("reduce_scatter", output);
  TESSERA_CHECK(input.dtype == output.dtype, "reduce_scatter: input " + describe(input) +
                                                 " and output " + describe(output) +
                                                 " differ in dtype");
  TESSERA_CHECK(input.count == output.count * static_cast<std::size_t>(size()),
                "reduce_scatter: input must hold size() * output.count = " +
                    std::to_string(output.count * static_cast<std::size_t>(size())) +
                    " elements, got " + std::to_string(input.count));
  // Peers read every block of this rank's input except block rank(); only an output placed
  // exactly there may share memory with it.
  TESSERA_CHECK(
      !overlaps(input, output) ||
          output.data == input.slice(static_cast<std::size_t>(rank()) * output.count, 0).data,
      "reduce_scatter: output overlaps input other than at block rank()");
  return checked(do_reduce_scatter(input, output, op));
}

std::shared_ptr<Work> Communicator::all_gather(BufferView input, BufferView output) {
  check_buffer("all_gather", input);
  check_buffer("all_gather", output);
  TESSERA_CHECK(input.dtype == output.dtype, "all_gather: input " + describe(input) +
                                                 " and output " + describe(output) +
                                                 " differ in dtype");
  TESSERA_CHECK(output.count == input.count * static_cast<std::size_t>(size()),
                "all_gather: output must hold size() * input.count = " +
                    std::to_string(input.count * static_cast<std::size_t>(size())) +
                    " elements, got " + std::to_string(output.count));
  TESSERA_CHECK(
      !overlaps(input, output) ||
          input.data == output.slice(static_cast<std::size_t>(rank()) * input.count, 0).data,
      "all_gather: input overlaps output other than at block rank()");
  return checked(do_all_gather(input, output));
}

std::shared_ptr<Work> Communicator::broadcast(BufferView data, int root) {
  check_buffer("broadcast", data);
  TESSERA_CHECK(root >= 0 && root < size(), "broadcast: root " + std::to_string(root) +
                                                " is outside [0, " + std::to_string(size()) + ")");
  return checked(do_broadcast(data, root));
}

std::shared_ptr<Work> Communicator::send(BufferView data, int peer, std::uint32_t tag) {
  check_buffer("send", data);
  TESSERA_CHECK(peer >= 0 && peer < size() && peer != rank(),
                "send: peer " + std::to_string(peer) + " is not another rank of this group");
  return checked(do_send(data, peer, tag));
}

std::shared_ptr<Work> Communicator::recv(BufferView data, int peer, std::uint32_t tag) {
  check_buffer("recv", data);
  TESSERA_CHECK(peer >= 0 && peer < size() && peer != rank(),
                "recv: peer " + std::to_string(peer) + " is not another rank of this group");
  return checked(do_recv(data, peer, tag));
}

std::shared_ptr<Work> Communicator::barrier() {
  return checked(do_barrier());
}

std::shared_ptr<Communicator> Communicator::split(int color, int key) {
  return do_split(color, key);
}

}  // namespace tessera
