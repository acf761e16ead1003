#include "communicator.hpp"

#include <string>

#include "cuda/cuda_allocator.hpp"
#include "tessera/base/error.hpp"

namespace tessera::nccl {

namespace {

ncclDataType_t nccl_type(DType dtype) {
  switch (dtype) {
    case DType::f32: return ncclFloat32;
    case DType::f64: return ncclFloat64;
    case DType::bf16: return ncclBfloat16;
    case DType::f16: return ncclFloat16;
    case DType::i32: return ncclInt32;
    case DType::i64: return ncclInt64;
    case DType::u8: return ncclUint8;
  }
  throw InvalidArgument("nccl: no NCCL type for dtype " + std::string(dtype_name(dtype)));
}

// One rank's average is its own value, as its sum is. NCCL 2.28.9's ncclAvg at one rank left the
// last of 4099 f64 elements of an out-of-place reduce_scatter unwritten on an H100 (the
// conformance suite found it), so a world of one sums instead: the same bits, NCCL's plain copy.
ncclRedOp_t nccl_op(ReduceOp op, int size) {
  switch (op) {
    case ReduceOp::sum: return ncclSum;
    case ReduceOp::avg: return size == 1 ? ncclSum : ncclAvg;
    case ReduceOp::min: return ncclMin;
    case ReduceOp::max: return ncclMax;
    case ReduceOp::prod: return ncclProd;
  }
  throw InvalidArgument("nccl: no NCCL reduction for this ReduceOp");
}

std::string named(const char* operation, const BufferView& view) {
  return std::string(operation) + "(" + std::to_string(view.count) + " x " +
         std::string(dtype_name(view.dtype)) + ")";
}

}  // namespace

NcclCommunicator::NcclCommunicator(std::shared_ptr<NcclComm> comm, Settings settings)
    : comm_(std::move(comm)), settings_(settings) {
  barrier_word_ = cuda::allocator_for(comm_->ordinal())->allocate(sizeof(std::int32_t));
}

NcclCommunicator::~NcclCommunicator() {
  // The word is freed on the default stream after every operation enqueued so far, a barrier
  // nobody waited for included: the free waits on the device, not here (a communicator whose
  // peer never comes is aborted when its NcclComm goes, which ends those operations).
  comm_->flush_group();
  comm_->order_before(nullptr);
  cuda::allocator_for(comm_->ordinal())->deallocate(barrier_word_, sizeof(std::int32_t));
}

std::shared_ptr<Work> NcclCommunicator::do_all_reduce(BufferView data, ReduceOp op) {
  const auto type = nccl_type(data.dtype);
  const auto reduce = nccl_op(op, size());
  return comm_->launch(named("all_reduce", data), [=](ncclComm_t comm, cudaStream_t stream) {
    return ncclAllReduce(data.data, data.data, data.count, type, reduce, comm, stream);
  });
}

std::shared_ptr<Work> NcclCommunicator::do_reduce_scatter(BufferView input, BufferView output,
                                                          ReduceOp op) {
  const auto type = nccl_type(input.dtype);
  const auto reduce = nccl_op(op, size());
  return comm_->launch(named("reduce_scatter", output), [=](ncclComm_t comm, cudaStream_t stream) {
    return ncclReduceScatter(input.data, output.data, output.count, type, reduce, comm, stream);
  });
}

std::shared_ptr<Work> NcclCommunicator::do_all_gather(BufferView input, BufferView output) {
  const auto type = nccl_type(input.dtype);
  return comm_->launch(named("all_gather", input), [=](ncclComm_t comm, cudaStream_t stream) {
    return ncclAllGather(input.data, output.data, input.count, type, comm, stream);
  });
}

std::shared_ptr<Work> NcclCommunicator::do_broadcast(BufferView data, int root) {
  const auto type = nccl_type(data.dtype);
  return comm_->launch(named("broadcast", data) + " from " + std::to_string(root),
                       [=](ncclComm_t comm, cudaStream_t stream) {
                         return ncclBroadcast(data.data, data.data, data.count, type, root, comm,
                                              stream);
                       });
}

// NCCL matches a send and a receive between two ranks by their order, not by a tag: tags are
// named in errors, and a program whose two ranks issue their messages to each other in the same
// order (which every tessera strategy does) gets the tag semantics of the other transports.
std::shared_ptr<Work> NcclCommunicator::do_send(BufferView data, int peer, std::uint32_t tag) {
  const auto type = nccl_type(data.dtype);
  return comm_->add_to_group(
      named("send", data) + " to " + std::to_string(peer) + " (tag " + std::to_string(tag) + ")",
      peer, [=](ncclComm_t comm, cudaStream_t stream) {
        return ncclSend(data.data, data.count, type, peer, comm, stream);
      });
}

std::shared_ptr<Work> NcclCommunicator::do_recv(BufferView data, int peer, std::uint32_t tag) {
  const auto type = nccl_type(data.dtype);
  return comm_->add_to_group(
      named("recv", data) + " from " + std::to_string(peer) + " (tag " + std::to_string(tag) + ")",
      peer, [=](ncclComm_t comm, cudaStream_t stream) {
        return ncclRecv(data.data, data.count, type, peer, comm, stream);
      });
}

std::shared_ptr<Work> NcclCommunicator::do_barrier() {
  void* word = barrier_word_;
  return comm_->launch("barrier", [=](ncclComm_t comm, cudaStream_t stream) {
    return ncclAllReduce(word, word, 1, ncclInt32, ncclSum, comm, stream);
  });
}

std::unique_ptr<Communicator> NcclCommunicator::do_split(int color, int key) {
  auto child = comm_->split(color, key);
  if (!child) return nullptr;
  return std::make_unique<NcclCommunicator>(std::move(child), settings_);
}

}  // namespace tessera::nccl
