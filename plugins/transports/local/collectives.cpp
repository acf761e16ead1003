// The collective algorithms of the local transport. Ranks are threads sharing an address space,
// so a rank reads its peers' buffers directly; the only protocol is which rank touches which
// bytes between which barriers. Every phase ends in a barrier, and every collective ends in
// one, so that no rank returns (and lets its caller reuse a buffer) while a peer still reads it.

#include <algorithm>
#include <cstring>

#include "communicator.hpp"
#include "tessera/base/error.hpp"

namespace tessera::local {

namespace {

// Element range [begin, end) of chunk `index` of `count` elements split over `parts` ranks.
// Chunk edges fall on 64-byte boundaries so that two ranks never write one cache line.
std::pair<std::size_t, std::size_t> chunk(std::size_t count, DType dtype, int parts, int index) {
  const std::size_t unit = std::max<std::size_t>(1, 64 / dtype_size(dtype));
  const std::size_t units = (count + unit - 1) / unit;
  const auto p = static_cast<std::size_t>(parts);
  const auto i = static_cast<std::size_t>(index);
  const std::size_t begin = std::min(count, units * i / p * unit);
  const std::size_t end = std::min(count, units * (i + 1) / p * unit);
  return {begin, end};
}

void copy_bytes(std::byte* destination, const std::byte* source, std::size_t bytes) {
  if (bytes != 0 && destination != source) std::memmove(destination, source, bytes);
}

}  // namespace

void LocalCommunicator::enter(const OpContext& context, const Contribution& contribution) {
  group_->slot(rank_) = contribution;
  group_->arrive_and_wait(context);
  const OpSignature& mine = contribution.signature;
  for (int r = 0; r < size(); ++r) {
    const OpSignature& theirs = group_->slot(r).signature;
    if (theirs == mine) continue;
    const std::string message = "local: rank " + std::to_string(rank_) + " issued " +
                                mine.describe() + " while rank " + std::to_string(r) + " issued " +
                                theirs.describe() +
                                "; every rank must issue the same collectives in the same order";
    group_->abort(message);
    throw TransportError(message, r, context.operation);
  }
}

void LocalCommunicator::reduce_ranks(std::byte* out, std::size_t offset, std::size_t n, DType dtype,
                                     ReduceOp op) {
  const std::size_t at = offset * dtype_size(dtype);
  if (size() == 1) {
    copy_bytes(out, group_->slot(0).input + at, n * dtype_size(dtype));
  } else {
    reduce_pair(out, group_->slot(0).input + at, group_->slot(1).input + at, n, dtype, op);
    for (int r = 2; r < size(); ++r) reduce_into(out, group_->slot(r).input + at, n, dtype, op);
  }
  finish_average(out, n, dtype, op, size());
}

// Each rank reduces one chunk (so N threads do N-way parallel work) into scratch, because
// its own buffer is one of the inputs; it publishes the result in its own buffer, and every
// rank then copies the chunks it does not own from their owners. Three barriers in all.
void LocalCommunicator::run_all_reduce(const OpContext& context, BufferView data, ReduceOp op) {
  Contribution contribution;
  contribution.signature = {"all_reduce", data.dtype, data.count, op, -1};
  contribution.input = data.byte_data();
  contribution.output = data.byte_data();
  enter(context, contribution);

  const std::size_t element = dtype_size(data.dtype);
  const auto [begin, end] = chunk(data.count, data.dtype, size(), rank_);
  scratch_.resize((end - begin) * element);
  if (end > begin) {
    reduce_ranks(scratch_.data(), begin, end - begin, data.dtype, op);
    // Nobody else reads chunk rank() of any buffer, so it may be overwritten at once.
    copy_bytes(data.byte_data() + begin * element, scratch_.data(), scratch_.size());
  }
  group_->arrive_and_wait(context);  // every owner published its chunk

  for (int owner = 0; owner < size(); ++owner) {
    if (owner == rank_) continue;
    const auto [b, e] = chunk(data.count, data.dtype, size(), owner);
    copy_bytes(data.byte_data() + b * element, group_->slot(owner).output + b * element,
               (e - b) * element);
  }
  group_->arrive_and_wait(context);  // nobody reads this rank's buffer any more
}

void LocalCommunicator::run_reduce_scatter(const OpContext& context, BufferView input,
                                           BufferView output, ReduceOp op) {
  Contribution contribution;
  contribution.signature = {"reduce_scatter", output.dtype, output.count, op, -1};
  contribution.input = input.byte_data();
  contribution.output = output.byte_data();
  enter(context, contribution);

  // Only this rank reads block rank() of any input, so an in-place output is safe once the
  // reduction runs in scratch.
  const std::size_t offset = static_cast<std::size_t>(rank_) * output.count;
  const bool in_place = output.count != 0 &&
                        output.byte_data() == input.byte_data() + offset * dtype_size(input.dtype);
  if (in_place) {
    scratch_.resize(output.bytes());
    reduce_ranks(scratch_.data(), offset, output.count, output.dtype, op);
    copy_bytes(output.byte_data(), scratch_.data(), output.bytes());
  } else if (output.count != 0) {
    reduce_ranks(output.byte_data(), offset, output.count, output.dtype, op);
  }
  group_->arrive_and_wait(context);
}

void LocalCommunicator::run_all_gather(const OpContext& context, BufferView input,
                                       BufferView output) {
  Contribution contribution;
  contribution.signature = {"all_gather", input.dtype, input.count, ReduceOp::sum, -1};
  contribution.input = input.byte_data();
  contribution.output = output.byte_data();
  enter(context, contribution);

  for (int r = 0; r < size(); ++r) {
    copy_bytes(output.byte_data() + static_cast<std::size_t>(r) * input.bytes(),
               group_->slot(r).input, input.bytes());
  }
  group_->arrive_and_wait(context);
}

void LocalCommunicator::run_broadcast(const OpContext& context, BufferView data, int root) {
  Contribution contribution;
  contribution.signature = {"broadcast", data.dtype, data.count, ReduceOp::sum, root};
  contribution.input = data.byte_data();
  contribution.output = data.byte_data();
  enter(context, contribution);

  if (rank_ != root) copy_bytes(data.byte_data(), group_->slot(root).input, data.bytes());
  group_->arrive_and_wait(context);
}

void LocalCommunicator::run_recv(const OpContext& context, BufferView data, int peer,
                                 std::uint32_t tag) {
  Message message = group_->take(peer, rank_, tag, context);
  if (message.dtype != data.dtype || message.count != data.count) {
    const std::string text = "local: " + context.operation + " on rank " + std::to_string(rank_) +
                             " expected " + std::to_string(data.count) + " x " +
                             std::string(dtype_name(data.dtype)) + " but rank " +
                             std::to_string(peer) + " sent " + std::to_string(message.count) +
                             " x " + std::string(dtype_name(message.dtype));
    group_->abort(text);
    throw TransportError(text, peer, context.operation);
  }
  copy_bytes(data.byte_data(), message.payload.data(), data.bytes());
}

// Every rank learns every (color, key); the first member of each new group creates its state
// and the others pick it up from that member's slot.
std::unique_ptr<Communicator> LocalCommunicator::run_split(const OpContext& context, int color,
                                                           int key) {
  Contribution contribution;
  contribution.signature.operation = "split";
  contribution.color = color;
  contribution.key = key;
  enter(context, contribution);

  std::vector<std::pair<int, int>> color_key;
  for (int r = 0; r < size(); ++r)
    color_key.emplace_back(group_->slot(r).color, group_->slot(r).key);
  const std::vector<int> members = split_group_members(color_key, rank_);
  if (!members.empty() && members.front() == rank_) {
    group_->slot(rank_).child = std::make_shared<LocalGroup>(static_cast<int>(members.size()));
  }
  group_->arrive_and_wait(context);  // every leader has published its group

  std::shared_ptr<LocalGroup> child;
  if (!members.empty()) child = group_->slot(members.front()).child;
  group_->arrive_and_wait(context);  // every member holds its group: leaders may let go
  group_->slot(rank_).child.reset();

  if (!child) return nullptr;
  const auto position = std::find(members.begin(), members.end(), rank_) - members.begin();
  return std::make_unique<LocalCommunicator>(std::move(child), static_cast<int>(position),
                                             timeout_);
}

}  // namespace tessera::local
