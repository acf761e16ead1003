#pragma once
// The collective algorithms, each the synchronous body of one operation on the engine thread,
// built on the Exchange's tagged messages. The algorithm depends on the message size:
//
//   all_reduce  small: every rank sends its whole buffer to every other and reduces all of
//               them itself (one round, N-1 messages each way).
//               large: each block of the buffer has an owner rank; every rank sends the owner
//               its part of the block, the owner reduces the contributions in rank order, one
//               pipeline segment at a time, and sends each reduced segment straight back to
//               every rank. The same bytes cross the wire as in a ring (2 (N-1)/N per rank),
//               but the owner sees all contributions at once, so the order is rank order and
//               the bits equal every other transport's (a ring would reduce in a rotating order).
//   reduce_scatter  the first half of the large all_reduce.
//   all_gather  every rank sends its block to every other.
//   broadcast   small: the root sends to everyone. large: the root scatters blocks, then the
//               ranks exchange them (the root sends about 2x the buffer, not N-1 times).
//   barrier     an empty message to and from every rank.

#include <cstddef>
#include <vector>

#include "exchange.hpp"
#include "tessera/base/buffer_view.hpp"
#include "tessera/transport_kit/reduce.hpp"

namespace tessera::ucx {

using Scratch = std::vector<std::byte>;

void run_all_reduce(Exchange& exchange, BufferView data, ReduceOp op, Scratch& scratch);
void run_reduce_scatter(Exchange& exchange, BufferView input, BufferView output, ReduceOp op,
                        Scratch& scratch);
void run_all_gather(Exchange& exchange, BufferView input, BufferView output);
void run_broadcast(Exchange& exchange, BufferView data, int root);
void run_barrier(Exchange& exchange);

}  // namespace tessera::ucx
