#include "collectives.hpp"

#include <algorithm>
#include <cstring>

#include "mapped.hpp"

namespace tessera::ucx {

namespace {

// Step of a message within one collective: phase << 14 | pipeline segment.
constexpr std::uint32_t kContribute = 0;
constexpr std::uint32_t kGather = 1;

std::uint32_t step(std::uint32_t phase, std::size_t segment) {
  return (phase << 14) | static_cast<std::uint32_t>(segment & 0x3FFF);
}

// Position of `peer`'s data in a scratch area that holds every rank but `me`.
std::size_t slot(int peer, int me) {
  return static_cast<std::size_t>(peer < me ? peer : peer - 1);
}

// out = in[0] op in[1] op ... in rank order, then the average's division. `out` may be one of
// the inputs; a later input cannot be the accumulator, so then `temp` (n elements) is.
void reduce_in_rank_order(std::byte* out, const std::vector<const std::byte*>& in, std::size_t n,
                          DType dtype, ReduceOp op, std::byte* temp) {
  if (in.size() == 1) {
    if (out != in[0] && n != 0) std::memcpy(out, in[0], n * dtype_size(dtype));
  } else {
    const bool out_is_later_input = std::find(in.begin() + 1, in.end(), out) != in.end();
    std::byte* acc = out_is_later_input ? temp : out;
    if (acc == in[0]) {
      reduce_into(acc, in[1], n, dtype, op);
    } else {
      reduce_pair(acc, in[0], in[1], n, dtype, op);
    }
    for (std::size_t r = 2; r < in.size(); ++r) reduce_into(acc, in[r], n, dtype, op);
    if (acc != out && n != 0) std::memcpy(out, acc, n * dtype_size(dtype));
  }
  finish_average(out, n, dtype, op, static_cast<int>(in.size()));
}

// Elements [offset[r], offset[r] + length[r]) belong to rank r.
struct Blocks {
  std::vector<std::size_t> offset;
  std::vector<std::size_t> length;

  static Blocks split(std::size_t count, int size) {
    Blocks b;
    const auto n = static_cast<std::size_t>(size);
    for (std::size_t r = 0, at = 0; r < n; ++r) {
      const std::size_t len = count / n + (r < count % n ? 1 : 0);
      b.offset.push_back(at);
      b.length.push_back(len);
      at += len;
    }
    return b;
  }
  static Blocks equal(std::size_t block, int size) {
    Blocks b;
    for (std::size_t r = 0; r < static_cast<std::size_t>(size); ++r) {
      b.offset.push_back(r * block);
      b.length.push_back(block);
    }
    return b;
  }
};

// Every rank sends block r of `input` to rank r, in segments; this rank reduces each segment of
// its own block in rank order into `mine` as soon as all contributions to it are in. With
// `gather`, each reduced segment then goes at once to every other rank, which receives it at
// the same place of its `input` (the all_reduce buffer) — so reduction and gathering overlap.
//
// Contributions land in a small ring of `depth` segment slots per peer rather than in a copy of
// the whole block: the receive for segment s + depth reuses segment s's slot once s is reduced.
// The ring stays in cache between UCX writing it and the reduction reading it, and scratch
// memory is depth segments per peer whatever the buffer size. Segments above UCX's rendezvous
// threshold that arrive before their receive is posted wait at the sender, uncopied.
void reduce_to_owners(Exchange& x, BufferView input, BufferView mine, const Blocks& blocks,
                      ReduceOp op, bool gather, Scratch& scratch) {
  const int me = x.engine().rank();
  const int n = x.engine().size();
  const DType dtype = input.dtype;
  const std::size_t es = dtype_size(dtype);
  const std::size_t seg = std::max<std::size_t>(1, x.engine().settings().segment_bytes / es);
  const auto length = [&](int r) { return blocks.length[static_cast<std::size_t>(r)]; };
  const auto offset = [&](int r) { return blocks.offset[static_cast<std::size_t>(r)]; };
  const auto segments = [&](int r) { return (length(r) + seg - 1) / seg; };
  const auto seg_len = [&](int r, std::size_t s) { return std::min(seg, length(r) - s * seg); };
  const std::size_t my_segments = segments(me);
  const std::size_t depth =
      std::min(std::max<std::size_t>(1, x.engine().settings().segments_in_flight), my_segments);
  const auto peers = static_cast<std::size_t>(n) - 1;

  scratch.resize((peers * depth + 1) * seg * es);
  std::byte* temp = scratch.data() + peers * depth * seg * es;
  const auto contribution = [&](int r, std::size_t s) {
    return scratch.data() + (slot(r, me) * depth + s % depth) * seg * es;
  };
  const auto in_input = [&](int r, std::size_t s) {
    return input.byte_data() + (offset(r) + s * seg) * es;
  };

  // Which segment each request id receives a contribution to; kNone for every other request.
  constexpr std::size_t kNone = ~std::size_t{0};
  std::vector<std::size_t> contribution_of;
  const auto post_contributions = [&](std::size_t s) {
    for (int p = 0; p < n; ++p) {
      if (p == me) continue;
      const std::size_t id =
          x.recv(p, contribution(p, s), seg_len(me, s) * es, step(kContribute, s));
      contribution_of.resize(id + 1, kNone);
      contribution_of[id] = s;
    }
  };
  // Receives first, so that the first contributions find them posted.
  for (std::size_t s = 0; s < depth; ++s) post_contributions(s);
  for (int o = 0; o < n; ++o) {
    if (o == me) continue;
    for (std::size_t s = 0; s < segments(o); ++s) {
      if (gather) x.recv(o, in_input(o, s), seg_len(o, s) * es, step(kGather, s));
      x.send(o, in_input(o, s), seg_len(o, s) * es, step(kContribute, s));
    }
  }

  std::vector<int> missing(my_segments, n - 1);
  std::vector<const std::byte*> in(static_cast<std::size_t>(n));
  const auto reduce_segment = [&](std::size_t s) {
    for (int r = 0; r < n; ++r)
      in[static_cast<std::size_t>(r)] = r == me ? in_input(me, s) : contribution(r, s);
    std::byte* out = mine.byte_data() + s * seg * es;
    reduce_in_rank_order(out, in, seg_len(me, s), dtype, op, temp);
    if (gather) {
      for (int p = 0; p < n; ++p)
        if (p != me) x.send(p, out, seg_len(me, s) * es, step(kGather, s));
    }
    if (s + depth < my_segments) post_contributions(s + depth);
  };
  if (n == 1) {
    for (std::size_t s = 0; s < my_segments; ++s) reduce_segment(s);
  }
  std::vector<std::size_t> finished;
  while (!x.done()) {
    finished.clear();
    x.wait_some(finished);
    for (const std::size_t id : finished) {
      if (id >= contribution_of.size() || contribution_of[id] == kNone) continue;
      const std::size_t s = contribution_of[id];
      if (--missing[s] == 0) reduce_segment(s);
    }
  }
}

// Small all_reduce: everyone gets everything and reduces it all itself.
void all_reduce_direct(Exchange& x, BufferView data, ReduceOp op, Scratch& scratch) {
  const int me = x.engine().rank();
  const int n = x.engine().size();
  const std::size_t bytes = data.bytes();
  scratch.resize(static_cast<std::size_t>(n) * bytes);
  for (int p = 0; p < n; ++p) {
    if (p == me) continue;
    x.recv(p, scratch.data() + slot(p, me) * bytes, bytes, step(kContribute, 0));
    x.send(p, data.data, bytes, step(kContribute, 0));
  }
  x.wait_all();
  std::vector<const std::byte*> in;
  for (int r = 0; r < n; ++r)
    in.push_back(r == me ? data.byte_data() : scratch.data() + slot(r, me) * bytes);
  reduce_in_rank_order(data.byte_data(), in, data.count, data.dtype, op,
                       scratch.data() + (static_cast<std::size_t>(n) - 1) * bytes);
}

}  // namespace

void run_all_reduce(Exchange& x, BufferView data, ReduceOp op, Scratch& scratch) {
  const int n = x.engine().size();
  if (data.bytes() <= x.engine().settings().small_bytes ||
      data.count < static_cast<std::size_t>(n)) {
    all_reduce_direct(x, data, op, scratch);
    return;
  }
  if (MappedGroup* mapped = x.engine().mapped(x)) {
    mapped->all_reduce(x, data, op);
    return;
  }
  const Blocks blocks = Blocks::split(data.count, n);
  const auto me = static_cast<std::size_t>(x.engine().rank());
  reduce_to_owners(x, data, data.slice(blocks.offset[me], blocks.length[me]), blocks, op, true,
                   scratch);
}

void run_reduce_scatter(Exchange& x, BufferView input, BufferView output, ReduceOp op,
                        Scratch& scratch) {
  if (input.bytes() > x.engine().settings().small_bytes && output.count > 0) {
    if (MappedGroup* mapped = x.engine().mapped(x)) {
      mapped->reduce_scatter(x, input, output, op);
      return;
    }
  }
  reduce_to_owners(x, input, output, Blocks::equal(output.count, x.engine().size()), op, false,
                   scratch);
}

void run_all_gather(Exchange& x, BufferView input, BufferView output) {
  if (output.bytes() > x.engine().settings().small_bytes && input.count > 0) {
    if (MappedGroup* mapped = x.engine().mapped(x)) {
      mapped->all_gather(x, input, output);
      return;
    }
  }
  const int me = x.engine().rank();
  const std::size_t bytes = input.bytes();
  std::byte* mine = output.byte_data() + static_cast<std::size_t>(me) * bytes;
  if (mine != input.data && bytes != 0) std::memcpy(mine, input.data, bytes);
  for (int p = 0; p < x.engine().size(); ++p) {
    if (p == me) continue;
    x.recv(p, output.byte_data() + static_cast<std::size_t>(p) * bytes, bytes, step(kGather, 0));
    x.send(p, input.data, bytes, step(kGather, 0));
  }
  x.wait_all();
}

void run_broadcast(Exchange& x, BufferView data, int root) {
  const int me = x.engine().rank();
  const int n = x.engine().size();
  if (data.bytes() <= x.engine().settings().small_bytes ||
      data.count < static_cast<std::size_t>(n)) {
    for (int p = 0; p < n && me == root; ++p)
      if (p != me) x.send(p, data.data, data.bytes(), step(kContribute, 0));
    if (me != root) x.recv(root, data.data, data.bytes(), step(kContribute, 0));
    x.wait_all();
    return;
  }
  if (MappedGroup* mapped = x.engine().mapped(x)) {
    mapped->broadcast(x, data, root);
    return;
  }
  // Scatter from the root, then every rank hands its block to everyone who lacks it.
  const Blocks blocks = Blocks::split(data.count, n);
  const std::size_t es = dtype_size(data.dtype);
  const auto block = [&](int r) {
    return data.byte_data() + blocks.offset[static_cast<std::size_t>(r)] * es;
  };
  const auto block_bytes = [&](int r) { return blocks.length[static_cast<std::size_t>(r)] * es; };
  if (me == root) {
    for (int p = 0; p < n; ++p) {
      if (p == me) continue;
      x.send(p, block(p), block_bytes(p), step(kContribute, 0));
      x.send(p, block(root), block_bytes(root), step(kGather, 0));
    }
    x.wait_all();
    return;
  }
  for (int q = 0; q < n; ++q)
    if (q != me) x.recv(q, block(q), block_bytes(q), step(kGather, 0));
  const std::size_t own = x.recv(root, block(me), block_bytes(me), step(kContribute, 0));
  std::vector<std::size_t> finished;
  bool forwarded = false;
  while (!x.done()) {
    finished.clear();
    x.wait_some(finished);
    if (!forwarded && std::find(finished.begin(), finished.end(), own) != finished.end()) {
      forwarded = true;
      for (int p = 0; p < n; ++p)
        if (p != me && p != root) x.send(p, block(me), block_bytes(me), step(kGather, 0));
    }
  }
}

void run_barrier(Exchange& x) {
  for (int p = 0; p < x.engine().size(); ++p) {
    if (p == x.engine().rank()) continue;
    x.recv(p, nullptr, 0, step(kContribute, 0));
    x.send(p, nullptr, 0, step(kContribute, 0));
  }
  x.wait_all();
}

}  // namespace tessera::ucx
