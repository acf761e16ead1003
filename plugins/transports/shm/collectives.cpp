#include "collectives.hpp"

#include <algorithm>
#include <cstring>

#include "tessera/transport_kit/staged_collectives.hpp"

namespace tessera::shm {

namespace {

using staging::reduce_in_rank_order;

// The group as tessera/transport_kit/staged_collectives.hpp sees it, for one operation.
struct GroupStage {
  Group& group;
  const char* op;
  Deadline deadline;

  [[nodiscard]] int rank() const noexcept { return group.rank(); }
  [[nodiscard]] int size() const noexcept { return group.size(); }
  std::uint64_t next_step() noexcept { return group.next_step(); }
  [[nodiscard]] std::byte* staging(int r, std::uint64_t step) const noexcept {
    return group.segment().staging(r, step);
  }
  [[nodiscard]] std::size_t staging_bytes() const noexcept {
    return group.segment().staging_bytes();
  }
  void publish(std::uint64_t progress) noexcept { group.publish(progress); }
  void await_all(std::uint64_t target) { group.await_all(target, op, deadline); }
  void await_rank(int r, std::uint64_t target) { group.await_rank(r, target, op, deadline); }
};

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

void all_reduce(Group& group, BufferView data, ReduceOp op) {
  constexpr const char* kOp = "all_reduce";
  group.throw_if_failed(kOp);
  if (group.size() == 1 || data.count == 0) return;
  const Deadline deadline = deadline_after(group.settings().timeout);
  if (data.bytes() <= std::min(group.settings().small_size, group.segment().staging_bytes())) {
    all_reduce_small(group, data, op, deadline);
    return;
  }
  GroupStage stage{group, kOp, deadline};
  staging::all_reduce(stage, data, op);
}

void reduce_scatter(Group& group, BufferView input, BufferView output, ReduceOp op) {
  constexpr const char* kOp = "reduce_scatter";
  group.throw_if_failed(kOp);
  if (group.size() == 1) {
    if (output.data != input.data) std::memmove(output.data, input.data, output.bytes());
    finish_average(output.data, output.count, output.dtype, op, 1);
    return;
  }
  if (output.count == 0) return;
  GroupStage stage{group, kOp, deadline_after(group.settings().timeout)};
  staging::reduce_scatter(stage, input, output, op);
}

void all_gather(Group& group, BufferView input, BufferView output) {
  constexpr const char* kOp = "all_gather";
  group.throw_if_failed(kOp);
  const std::size_t block = input.count;
  std::byte* own = output.byte_data() + static_cast<std::size_t>(group.rank()) * input.bytes();
  if (group.size() == 1 || block == 0) {
    if (block > 0 && own != input.data) std::memmove(own, input.data, input.bytes());
    return;
  }
  GroupStage stage{group, kOp, deadline_after(group.settings().timeout)};
  staging::all_gather(stage, input, output);
}

void broadcast(Group& group, BufferView data, int root) {
  constexpr const char* kOp = "broadcast";
  group.throw_if_failed(kOp);
  if (group.size() == 1 || data.count == 0) return;
  GroupStage stage{group, kOp, deadline_after(group.settings().timeout)};
  staging::broadcast(stage, data, root);
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
