#include "group.hpp"

#include <utility>

#include "tessera/base/error.hpp"

namespace tessera::local {

std::string OpSignature::describe() const {
  std::string text =
      operation + "(" + std::to_string(count) + " x " + std::string(dtype_name(dtype));
  if (operation == "all_reduce" || operation == "reduce_scatter") {
    text += ", " + std::string(reduce_op_name(op));
  }
  if (root >= 0) text += ", root " + std::to_string(root);
  return text + ")";
}

std::string rank_list(const std::vector<int>& ranks) {
  std::string text;
  for (int r : ranks) text += (text.empty() ? "" : ", ") + std::to_string(r);
  return text;
}

LocalGroup::LocalGroup(int size)
    : size_(size),
      slots_(static_cast<std::size_t>(size)),
      barriers_entered_(static_cast<std::size_t>(size), 0),
      joined_(static_cast<std::size_t>(size), false) {}

void LocalGroup::join(const OpContext& context) {
  std::unique_lock lock(mutex_);
  const auto index = static_cast<std::size_t>(context.rank);
  if (joined_[index]) {
    throw TransportError("local: rank " + std::to_string(context.rank) +
                             " connected twice to the same group; each rank connects once",
                         context.rank, "connect");
  }
  joined_[index] = true;
  const auto missing = wait_for_everyone(lock, context);
  if (missing.empty()) return;
  const std::string message = "local: connect of rank " + std::to_string(context.rank) + " of " +
                              std::to_string(size_) + " timed out after " +
                              std::to_string(context.timeout.count()) +
                              " ms; rank(s) never arrived: " + rank_list(missing);
  abort_locked(message);
  throw Timeout(message);
}

void LocalGroup::arrive_and_wait(const OpContext& context) {
  std::unique_lock lock(mutex_);
  const auto missing = wait_for_everyone(lock, context);
  if (missing.empty()) return;
  const std::string message = "local: " + context.operation + " on rank " +
                              std::to_string(context.rank) + " timed out after " +
                              std::to_string(context.timeout.count()) + " ms waiting for rank(s) " +
                              rank_list(missing);
  abort_locked(message);
  throw TransportError(message, missing.front(), context.operation);
}

std::vector<int> LocalGroup::wait_for_everyone(std::unique_lock<std::mutex>& lock,
                                               const OpContext& context) {
  throw_if_aborted(context);
  const std::uint64_t generation = generation_;
  barriers_entered_[static_cast<std::size_t>(context.rank)] = generation + 1;
  if (++arrived_ == size_) {
    arrived_ = 0;
    ++generation_;
    changed_.notify_all();
    return {};
  }
  const bool passed = changed_.wait_until(lock, context.deadline, [&] {
    return generation_ != generation || abort_reason_.has_value();
  });
  if (generation_ != generation) return {};
  if (passed) throw_if_aborted(context);
  std::vector<int> missing;
  for (int r = 0; r < size_; ++r) {
    if (barriers_entered_[static_cast<std::size_t>(r)] <= generation) missing.push_back(r);
  }
  return missing;
}

void LocalGroup::check_alive(const OpContext& context) {
  std::lock_guard lock(mutex_);
  throw_if_aborted(context);
}

void LocalGroup::throw_if_aborted(const OpContext& context) const {
  if (!abort_reason_) return;
  throw TransportError("local: " + context.operation + " on rank " + std::to_string(context.rank) +
                           " failed: group aborted: " + *abort_reason_,
                       std::nullopt, context.operation);
}

void LocalGroup::abort(const std::string& reason) noexcept {
  std::lock_guard lock(mutex_);
  try {
    abort_locked(reason);
  } catch (...) {
    abort_reason_.emplace();  // out of memory for the text: still wake every waiter
  }
  changed_.notify_all();
}

void LocalGroup::abort_locked(const std::string& reason) {
  if (!abort_reason_) abort_reason_ = reason;
  changed_.notify_all();
}

void LocalGroup::post(int source, int destination, std::uint32_t tag, Message message) {
  {
    std::lock_guard lock(mutex_);
    mailboxes_[{source, destination, tag}].push_back(std::move(message));
  }
  changed_.notify_all();
}

Message LocalGroup::take(int source, int destination, std::uint32_t tag, const OpContext& context) {
  std::unique_lock lock(mutex_);
  auto& box = mailboxes_[{source, destination, tag}];
  const bool arrived = changed_.wait_until(
      lock, context.deadline, [&] { return !box.empty() || abort_reason_.has_value(); });
  throw_if_aborted(context);
  if (!arrived) {
    const std::string message = "local: " + context.operation + " on rank " +
                                std::to_string(context.rank) + " timed out after " +
                                std::to_string(context.timeout.count()) + " ms: rank " +
                                std::to_string(source) + " sent nothing matching";
    abort_locked(message);
    throw TransportError(message, source, context.operation);
  }
  Message message = std::move(box.front());
  box.pop_front();
  return message;
}

}  // namespace tessera::local
