#pragma once
// The collective algorithms. Each is the synchronous body of one operation: it runs on
// whichever thread runs the group's queue, blocks until done, and throws TransportError.
//
// Every one moves data through the ranks' staging buffers in rounds, one group step per
// round, so that a round's data stays in cache between the copy in and the reads by peers,
// and the two buffers per rank let a fast rank stage round k+1 while peers still read round k.

#include "group.hpp"
#include "tessera/base/buffer_view.hpp"
#include "tessera/transport_kit/reduce.hpp"

namespace tessera::shm {

void all_reduce(Group& group, BufferView data, ReduceOp op);
void reduce_scatter(Group& group, BufferView input, BufferView output, ReduceOp op);
void all_gather(Group& group, BufferView input, BufferView output);
void broadcast(Group& group, BufferView data, int root);
void barrier(Group& group);

}  // namespace tessera::shm
