#include "collectives.hpp"

#include <algorithm>
#include <cstring>

namespace tessera::shm {

namespace {

struct Slice {
  std::size_t offset;
  std::size_t count;
};

// Part `index` of `count` elements cut into `parts` near-equal pieces, the first ones larger.
Slice slice_of(std::size_t count, int parts, int index) noexcept {
  const auto p = static_cast<std::size_t>(parts);
  const auto i = static_cast<std::size_t>(index);
  const std::size_t base = count / p;
  const std::size_t extra = count % p;
  return {i * base + std::min(i, extra), base + (i < extra ? 1 : 0)};
}

// result = x0 op x1 op ... op x(n-1), in rank order: the order that makes every rank, and
// every transport, produce the same bits.
template <class Contribution>
void reduce_in_rank_order(void* result, Contribution&& contribution, int n, std::size_t count,
                          DType dtype, ReduceOp op) {
  reduce_pair(result, contribution(0), contribution(1), count, dtype, op);
  for (int j = 2; j < n; ++j) reduce_into(result, contribution(j), count, dtype, op);
  finish_average(result, count, dtype, op, n);
}

bool overlaps(const void* a, std::size_t a_bytes, const void* b, std::size_t b_bytes) noexcept {
  const auto x = reinterpret_cast<std::uintptr_t>(a);
  const auto y = reinterpret_cast<std::uintptr_t>(b);
  return x < y + b_bytes && y < x + a_bytes;
}

// The latency path: one synchronisation. Every rank stages its whole input and reduces all
// of them itself, reading N times the data — cheap below a few tens of KiB.
//
// It publishes no `released(step)`. Only a peer about to reuse its staging buffer at step + 2
// waits for that, and by then this rank's next operation has published staged(step + 1) or
// more, which every operation does before waiting for anything of its own step. That saves a
// store to the cache line every peer polls. Likewise the wait for released(step - 2) reads
// nothing shared: the peers were seen at staged(step - 1) during the previous step.
void all_reduce_small(Group& group, BufferView data, ReduceOp op, Deadline deadline) {
  constexpr const char* kOp = "all_reduce";
  const Segment& segment = group.segment();
  const std::uint64_t step = group.next_step();
  group.await_all(released(step - 2), kOp, deadline);
  std::memcpy(segment.staging(group.rank(), step), data.data, data.bytes());
  group.publish(staged(step));
  group.await_all(staged(step), kOp, deadline);
  reduce_in_rank_order(
      data.data, [&](int j) { return segment.staging(j, step); }, group.size(), data.count,
      data.dtype, op);
}

}  // namespace

// Reduce-scatter then all-gather per round: rank r stages the slices its peers reduce (never
// its own), reduces slice r from its own buffer and the peers' staging, and copies the
// reduced slices of the others back out. Each user byte is read once and written once.
void all_reduce(Group& group, BufferView data, ReduceOp op) {
  constexpr const char* kOp = "all_reduce";
  group.throw_if_failed(kOp);
  const int n = group.size();
  const int r = group.rank();
  if (n == 1 || data.count == 0) return;
  const Deadline deadline = deadline_after(group.settings().timeout);
  const Segment& segment = group.segment();
  if (data.bytes() <= std::min(group.settings().small_size, segment.staging_bytes())) {
    all_reduce_small(group, data, op, deadline);
    return;
  }
  const std::size_t es = dtype_size(data.dtype);
  const std::size_t round = segment.staging_bytes() / es;
  for (std::size_t start = 0; start < data.count; start += round) {
    const std::size_t count = std::min(round, data.count - start);
    std::byte* user = data.byte_data() + start * es;
    const std::uint64_t step = group.next_step();
    std::byte* mine = segment.staging(r, step);

    group.await_all(released(step - 2), kOp, deadline);
    for (int j = 0; j < n; ++j) {
      if (j == r) continue;
      const Slice s = slice_of(count, n, j);
      std::memcpy(mine + s.offset * es, user + s.offset * es, s.count * es);
    }
    group.publish(staged(step));

    group.await_all(staged(step), kOp, deadline);
    const Slice own = slice_of(count, n, r);
    if (own.count > 0) {
      std::byte* result = mine + own.offset * es;
      reduce_in_rank_order(
          result,
          [&](int j) -> const void* {
            return (j == r ? user : segment.staging(j, step)) + own.offset * es;
          },
          n, own.count, data.dtype, op);
      std::memcpy(user + own.offset * es, result, own.count * es);
    }
    group.publish(reduced(step));

    group.await_all(reduced(step), kOp, deadline);
    for (int j = 0; j < n; ++j) {
      if (j == r) continue;
      const Slice s = slice_of(count, n, j);
      std::memcpy(user + s.offset * es, segment.staging(j, step) + s.offset * es, s.count * es);
    }
    group.publish(released(step));
  }
}

void reduce_scatter(Group& group, BufferView input, BufferView output, ReduceOp op) {
  constexpr const char* kOp = "reduce_scatter";
  group.throw_if_failed(kOp);
  const int n = group.size();
  const int r = group.rank();
  const std::size_t es = dtype_size(input.dtype);
  const std::size_t block = output.count;
  if (n == 1) {
    if (output.data != input.data) std::memmove(output.data, input.data, output.bytes());
    finish_average(output.data, output.count, output.dtype, op, 1);
    return;
  }
  if (block == 0) return;
  const Deadline deadline = deadline_after(group.settings().timeout);
  const Segment& segment = group.segment();
  // Written in place, our own block must be staged too, or the first partial result would
  // overwrite it before it is read.
  const bool stage_own = overlaps(output.data, output.bytes(), input.data, input.bytes());
  const std::size_t chunk = segment.staging_bytes() / (static_cast<std::size_t>(n) * es);
  for (std::size_t start = 0; start < block; start += chunk) {
    const std::size_t count = std::min(chunk, block - start);
    const std::uint64_t step = group.next_step();
    std::byte* mine = segment.staging(r, step);
    auto in_block = [&](int j) {
      return input.byte_data() + (static_cast<std::size_t>(j) * block + start) * es;
    };

    group.await_all(released(step - 2), kOp, deadline);
    for (int j = 0; j < n; ++j) {
      if (j == r && !stage_own) continue;
      std::memcpy(mine + static_cast<std::size_t>(j) * chunk * es, in_block(j), count * es);
    }
    group.publish(staged(step));

    group.await_all(staged(step), kOp, deadline);
    const std::size_t own_offset = static_cast<std::size_t>(r) * chunk * es;
    reduce_in_rank_order(
        output.byte_data() + start * es,
        [&](int j) -> const void* {
          return j == r && !stage_own ? in_block(r) : segment.staging(j, step) + own_offset;
        },
        n, count, input.dtype, op);
    group.publish(released(step));
  }
}

void all_gather(Group& group, BufferView input, BufferView output) {
  constexpr const char* kOp = "all_gather";
  group.throw_if_failed(kOp);
  const int n = group.size();
  const int r = group.rank();
  const std::size_t es = dtype_size(input.dtype);
  const std::size_t block = input.count;
  auto out_block = [&](int j, std::size_t start) {
    return output.byte_data() + (static_cast<std::size_t>(j) * block + start) * es;
  };
  if (n == 1 || block == 0) {
    if (block > 0 && out_block(r, 0) != input.data)
      std::memmove(out_block(r, 0), input.data, input.bytes());
    return;
  }
  const Deadline deadline = deadline_after(group.settings().timeout);
  const Segment& segment = group.segment();
  const std::size_t chunk = segment.staging_bytes() / es;
  for (std::size_t start = 0; start < block; start += chunk) {
    const std::size_t count = std::min(chunk, block - start);
    const std::uint64_t step = group.next_step();
    const std::byte* in = input.byte_data() + start * es;

    group.await_all(released(step - 2), kOp, deadline);
    std::memcpy(segment.staging(r, step), in, count * es);
    group.publish(staged(step));
    if (out_block(r, start) != in) std::memmove(out_block(r, start), in, count * es);

    group.await_all(staged(step), kOp, deadline);
    for (int j = 0; j < n; ++j) {
      if (j != r) std::memcpy(out_block(j, start), segment.staging(j, step), count * es);
    }
    group.publish(released(step));
  }
}

void broadcast(Group& group, BufferView data, int root) {
  constexpr const char* kOp = "broadcast";
  group.throw_if_failed(kOp);
  if (group.size() == 1 || data.count == 0) return;
  const Deadline deadline = deadline_after(group.settings().timeout);
  const Segment& segment = group.segment();
  const std::size_t chunk = segment.staging_bytes();
  for (std::size_t start = 0; start < data.bytes(); start += chunk) {
    const std::size_t bytes = std::min(chunk, data.bytes() - start);
    const std::uint64_t step = group.next_step();
    if (group.rank() == root) {
      group.await_all(released(step - 2), kOp, deadline);
      std::memcpy(segment.staging(root, step), data.byte_data() + start, bytes);
    } else {
      group.await_rank(root, staged(step), kOp, deadline);
      std::memcpy(data.byte_data() + start, segment.staging(root, step), bytes);
    }
    group.publish(released(step));
  }
}

void barrier(Group& group) {
  constexpr const char* kOp = "barrier";
  group.throw_if_failed(kOp);
  if (group.size() == 1) return;
  const std::uint64_t step = group.next_step();
  group.publish(released(step));
  group.await_all(staged(step), kOp, deadline_after(group.settings().timeout));
}

}  // namespace tessera::shm
