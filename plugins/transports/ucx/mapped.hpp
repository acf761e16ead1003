#pragma once
// Mapped: the large collectives of a group whose ranks can all map each other's memory.
//
// Messages over UCX's shared-memory transports cost a kernel copy per byte (CMA's
// process_vm_readv, which also pins every page of the peer). Where every peer is on this host
// and UCX offers a memory domain that both allocates shared memory and maps a peer's
// (posix and sysv do: ucp_rkey_ptr), each rank instead allocates a region with ucp_mem_map and
// every peer maps it. The large all_reduce, reduce_scatter, all_gather and broadcast then run
// as in the shm transport: ranks copy into their own staging buffers, owners reduce straight from
// their peers' buffers in rank order, and progress counters in the regions say how far each rank
// has got. UCX still carries everything else, and its engine still notices dead peers and
// aborts while a rank waits here.
//
// Region of one rank: a page of control (its progress counter), then two staging buffers.

#include <ucp/api/ucp.h>

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <vector>

#include "exchange.hpp"
#include "tessera/base/buffer_view.hpp"
#include "tessera/transport_kit/reduce.hpp"

namespace tessera::ucx {

class MappedGroup {
 public:
  // Collective over `x` (the first large collective of the group runs it): every rank
  // allocates its region and maps every peer's. Returns nullptr on every rank alike when some
  // rank cannot map some peer (another host, or transports without rkey_ptr such as tcp).
  static std::unique_ptr<MappedGroup> connect(Exchange& x, std::size_t chunk_bytes);
  ~MappedGroup();
  MappedGroup(const MappedGroup&) = delete;
  MappedGroup& operator=(const MappedGroup&) = delete;

  void all_reduce(Exchange& x, BufferView data, ReduceOp op);
  void reduce_scatter(Exchange& x, BufferView input, BufferView output, ReduceOp op);
  void all_gather(Exchange& x, BufferView input, BufferView output);
  void broadcast(Exchange& x, BufferView data, int root);

 private:
  class Stage;
  MappedGroup(ucp_context_h context, int rank, int size, std::size_t staging_bytes);

  [[nodiscard]] std::atomic<std::uint64_t>& progress(int rank) const;
  [[nodiscard]] std::byte* staging(int rank, std::uint64_t step) const;
  void publish(std::uint64_t value) const;
  // Spins until every peer's (or one peer's) progress reaches `target`, servicing the engine
  // (failures, aborts, dead processes) between rounds of polls and yielding once it has
  // waited a while.
  void await_all(Exchange& x, std::uint64_t target);
  void await_rank(Exchange& x, int peer, std::uint64_t target);

  ucp_context_h context_;
  const int rank_;
  const int size_;
  const std::size_t staging_bytes_;
  ucp_mem_h memory_ = nullptr;
  std::byte* own_ = nullptr;
  std::vector<ucp_rkey_h> rkeys_;
  std::vector<std::byte*> bases_;  // every rank's region, mapped here
  std::uint64_t step_;
};

}  // namespace tessera::ucx
