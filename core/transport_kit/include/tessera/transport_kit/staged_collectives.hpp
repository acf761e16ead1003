#pragma once
// Collectives over memory every rank of a group can read: the algorithms of the shm transport,
// for any transport that can give its ranks such memory (the ucx transport, where UCX maps
// peers' memory). Header-only templates over a `Stage`, which supplies:
//
//   int rank() const; int size() const;
//   std::uint64_t next_step();             // the group's collective step counter
//   std::byte* staging(int rank, std::uint64_t step) const;  // rank's buffer for `step`
//   std::size_t staging_bytes() const;     // bytes of one staging buffer
//   void publish(std::uint64_t progress);  // makes this rank's progress (and prior writes) visible
//   void await_all(std::uint64_t target);  // until every peer's progress >= target; throws on
//                                          // failure or deadline
//   void await_rank(int rank, std::uint64_t target);  // the same for one peer (broadcast)
//
// Each rank owns two staging buffers (step % 2) that everybody reads, and one progress counter
// that only it writes: progress = 3 * step + phase. Data moves in rounds, one step per round,
// so that a round's data stays in cache between the copy in and the reads by peers, and a
// fast rank stages round k + 1 while peers still read round k. Reductions run in rank order,
// so every rank (and every transport following the reduce.hpp contract) gets the same bits.

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstring>

#include "tessera/base/buffer_view.hpp"
#include "tessera/transport_kit/reduce.hpp"

namespace tessera::staging {

// Phases of one step, encoded as progress = 3 * step + phase. A rank's buffer for step s
// (staging buffer s % 2) may be rewritten once every peer has released step s - 2.
inline constexpr std::uint64_t staged(std::uint64_t step) noexcept {
  return 3 * step + 1;
}
inline constexpr std::uint64_t reduced(std::uint64_t step) noexcept {
  return 3 * step + 2;
}
inline constexpr std::uint64_t released(std::uint64_t step) noexcept {
  return 3 * step + 3;
}
// Steps start here, and every rank's progress starts at released(kFirstStep - 1), so that
// "released(step - 2)" holds for the first two steps.
inline constexpr std::uint64_t kFirstStep = 2;
inline constexpr std::uint64_t kInitialProgress = released(kFirstStep - 1);

struct Slice {
  std::size_t offset;
  std::size_t count;
};

// Part `index` of `count` elements cut into `parts` near-equal pieces, the first ones larger.
inline Slice slice_of(std::size_t count, int parts, int index) noexcept {
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

inline bool overlaps(const void* a, std::size_t a_bytes, const void* b,
                     std::size_t b_bytes) noexcept {
  const auto x = reinterpret_cast<std::uintptr_t>(a);
  const auto y = reinterpret_cast<std::uintptr_t>(b);
  return x < y + b_bytes && y < x + a_bytes;
}

// Reduce-scatter then all-gather per round: rank r stages the slices its peers reduce (never
// its own), reduces slice r from its own buffer and the peers' staging, and copies the reduced
// slices of the others back out. Each user byte is read once and written once. Needs size > 1.
template <class Stage>
void all_reduce(Stage& stage, BufferView data, ReduceOp op) {
  const int n = stage.size();
  const int r = stage.rank();
  const std::size_t es = dtype_size(data.dtype);
  const std::size_t round = stage.staging_bytes() / es;
  for (std::size_t start = 0; start < data.count; start += round) {
    const std::size_t count = std::min(round, data.count - start);
    std::byte* user = data.byte_data() + start * es;
    const std::uint64_t step = stage.next_step();
    std::byte* mine = stage.staging(r, step);

    stage.await_all(released(step - 2));
    for (int j = 0; j < n; ++j) {
      if (j == r) continue;
      const Slice s = slice_of(count, n, j);
      std::memcpy(mine + s.offset * es, user + s.offset * es, s.count * es);
    }
    stage.publish(staged(step));

    stage.await_all(staged(step));
    const Slice own = slice_of(count, n, r);
    if (own.count > 0) {
      std::byte* result = mine + own.offset * es;
      reduce_in_rank_order(
          result,
          [&](int j) -> const void* {
            return (j == r ? user : stage.staging(j, step)) + own.offset * es;
          },
          n, own.count, data.dtype, op);
      std::memcpy(user + own.offset * es, result, own.count * es);
    }
    stage.publish(reduced(step));

    stage.await_all(reduced(step));
    for (int j = 0; j < n; ++j) {
      if (j == r) continue;
      const Slice s = slice_of(count, n, j);
      std::memcpy(user + s.offset * es, stage.staging(j, step) + s.offset * es, s.count * es);
    }
    stage.publish(released(step));
  }
}

// Needs size > 1 and output.count > 0.
template <class Stage>
void reduce_scatter(Stage& stage, BufferView input, BufferView output, ReduceOp op) {
  const int n = stage.size();
  const int r = stage.rank();
  const std::size_t es = dtype_size(input.dtype);
  const std::size_t block = output.count;
  // Written in place, our own block must be staged too, or the first partial result would
  // overwrite it before it is read.
  const bool stage_own = overlaps(output.data, output.bytes(), input.data, input.bytes());
  const std::size_t chunk = stage.staging_bytes() / (static_cast<std::size_t>(n) * es);
  for (std::size_t start = 0; start < block; start += chunk) {
    const std::size_t count = std::min(chunk, block - start);
    const std::uint64_t step = stage.next_step();
    std::byte* mine = stage.staging(r, step);
    auto in_block = [&](int j) {
      return input.byte_data() + (static_cast<std::size_t>(j) * block + start) * es;
    };

    stage.await_all(released(step - 2));
    for (int j = 0; j < n; ++j) {
      if (j == r && !stage_own) continue;
      std::memcpy(mine + static_cast<std::size_t>(j) * chunk * es, in_block(j), count * es);
    }
    stage.publish(staged(step));

    stage.await_all(staged(step));
    const std::size_t own_offset = static_cast<std::size_t>(r) * chunk * es;
    reduce_in_rank_order(
        output.byte_data() + start * es,
        [&](int j) -> const void* {
          return j == r && !stage_own ? in_block(r) : stage.staging(j, step) + own_offset;
        },
        n, count, input.dtype, op);
    stage.publish(released(step));
  }
}

// Needs size > 1 and input.count > 0.
template <class Stage>
void all_gather(Stage& stage, BufferView input, BufferView output) {
  const int n = stage.size();
  const int r = stage.rank();
  const std::size_t es = dtype_size(input.dtype);
  const std::size_t block = input.count;
  auto out_block = [&](int j, std::size_t start) {
    return output.byte_data() + (static_cast<std::size_t>(j) * block + start) * es;
  };
  const std::size_t chunk = stage.staging_bytes() / es;
  for (std::size_t start = 0; start < block; start += chunk) {
    const std::size_t count = std::min(chunk, block - start);
    const std::uint64_t step = stage.next_step();
    const std::byte* in = input.byte_data() + start * es;

    stage.await_all(released(step - 2));
    std::memcpy(stage.staging(r, step), in, count * es);
    stage.publish(staged(step));
    if (out_block(r, start) != in) std::memmove(out_block(r, start), in, count * es);

    stage.await_all(staged(step));
    for (int j = 0; j < n; ++j) {
      if (j != r) std::memcpy(out_block(j, start), stage.staging(j, step), count * es);
    }
    stage.publish(released(step));
  }
}

// The root stages each round and publishes it; the others copy it out. Needs size > 1.
template <class Stage>
void broadcast(Stage& stage, BufferView data, int root) {
  const std::size_t chunk = stage.staging_bytes();
  for (std::size_t start = 0; start < data.bytes(); start += chunk) {
    const std::size_t bytes = std::min(chunk, data.bytes() - start);
    const std::uint64_t step = stage.next_step();
    if (stage.rank() == root) {
      stage.await_all(released(step - 2));
      std::memcpy(stage.staging(root, step), data.byte_data() + start, bytes);
    } else {
      stage.await_rank(root, staged(step));
      std::memcpy(data.byte_data() + start, stage.staging(root, step), bytes);
    }
    stage.publish(released(step));
  }
}

}  // namespace tessera::staging
