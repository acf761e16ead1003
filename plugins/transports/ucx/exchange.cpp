#include "exchange.hpp"

#include <algorithm>
#include <chrono>

#include "backoff.hpp"
#include "tags.hpp"
#include "tessera/base/error.hpp"

namespace tessera::ucx {

Exchange::Exchange(Engine& engine, std::string operation, std::uint64_t sequence)
    : engine_(engine),
      operation_(std::move(operation)),
      sequence_(sequence),
      deadline_(deadline_after(engine.settings().timeout)) {}

Exchange::~Exchange() {
  std::deque<Request> unfinished;
  for (auto& request : requests_) {
    if (request.finished()) continue;
    // A receive must not land in the caller's buffer after the operation failed.
    if (request.is_recv) engine_.worker().cancel(request);
    unfinished.push_back(request);
  }
  if (!unfinished.empty()) engine_.adopt(std::move(unfinished));
}

std::size_t Exchange::send(int peer, const void* data, std::size_t bytes, std::uint32_t step) {
  auto& request = requests_.emplace_back();
  engine_.worker().send(request, peer, data, bytes,
                        collective_tag(engine_.rank(), sequence_, step));
  reported_.push_back(false);
  unreported_ids_.push_back(requests_.size() - 1);
  ++unreported_;
  return requests_.size() - 1;
}

std::size_t Exchange::recv(int peer, void* data, std::size_t bytes, std::uint32_t step) {
  auto& request = requests_.emplace_back();
  engine_.worker().recv(request, peer, data, bytes, collective_tag(peer, sequence_, step),
                        kFullMask);
  reported_.push_back(false);
  unreported_ids_.push_back(requests_.size() - 1);
  ++unreported_;
  return requests_.size() - 1;
}

void Exchange::check(Request& request) {
  if (request.status == UCS_OK) return;
  const std::string peer = std::to_string(request.peer);
  if (request.status == UCS_ERR_MESSAGE_TRUNCATED) {
    engine_.abort(operation_ + ": rank " + peer + " sent " + std::to_string(request.info.length) +
                      " bytes where " + std::to_string(request.expected_bytes) +
                      " were expected (did the ranks issue different operations?)",
                  request.peer);
  } else {
    engine_.abort(operation_ + ": " + (request.is_recv ? "receive from" : "send to") + " rank " +
                      peer + " failed: " + ucs_status_string(request.status),
                  request.peer);
  }
  engine_.throw_if_aborted(operation_);
}

void Exchange::fail_at_deadline() {
  std::vector<int> waiting_for;
  for (const bool receives : {true, false}) {
    for (std::size_t i = 0; i < requests_.size(); ++i) {
      if (!reported_[i] && requests_[i].is_recv == receives)
        waiting_for.push_back(requests_[i].peer);
    }
    if (!waiting_for.empty()) break;
  }
  std::sort(waiting_for.begin(), waiting_for.end());
  waiting_for.erase(std::unique(waiting_for.begin(), waiting_for.end()), waiting_for.end());
  std::string ranks;
  for (const int r : waiting_for) ranks += (ranks.empty() ? "" : ", ") + std::to_string(r);
  engine_.abort(operation_ + " timed out after " +
                    std::to_string(engine_.settings().timeout.count()) +
                    " ms waiting for rank(s) " + ranks,
                waiting_for.empty() ? std::nullopt : std::optional<int>(waiting_for.front()));
  engine_.throw_if_aborted(operation_);
  throw Timeout("ucx: " + operation_ + " timed out");  // unreachable: abort() always sticks
}

void Exchange::wait_some(std::vector<std::size_t>& finished) {
  Backoff backoff;
  for (;;) {
    engine_.throw_if_aborted(operation_);
    // Only the unreported requests are looked at: a large collective posts hundreds.
    bool any = false;
    Request* failed = nullptr;
    std::size_t kept = 0;
    for (const std::size_t i : unreported_ids_) {
      if (!engine_.worker().poll(requests_[i])) {
        unreported_ids_[kept++] = i;
        continue;
      }
      if (requests_[i].status != UCS_OK && failed == nullptr) failed = &requests_[i];
      reported_[i] = true;
      --unreported_;
      finished.push_back(i);
      any = true;
    }
    unreported_ids_.resize(kept);
    if (failed != nullptr) check(*failed);
    if (any || unreported_ == 0) return;
    for (const std::size_t i : unreported_ids_) abort_if_departed(requests_[i].peer);
    const auto now = std::chrono::steady_clock::now();
    if (now >= next_stall_check_) {
      // Only the peers this operation still waits for are judged (a few checks a second).
      next_stall_check_ = now + std::chrono::milliseconds(100);
      for (const std::size_t i : unreported_ids_) {
        if (engine_.check_stalled(requests_[i].peer, operation_, sequence_)) break;
      }
      engine_.throw_if_aborted(operation_);
    }
    if (now >= deadline_) fail_at_deadline();
    if (engine_.service()) {
      backoff.reset();
    } else {
      backoff.idle();
    }
  }
}

void Exchange::abort_if_departed(int peer) {
  if (engine_.departed(peer)) {
    engine_.abort(operation_ + ": rank " + std::to_string(peer) +
                      " destroyed its communicator while this operation needed it",
                  peer);
  }
}

void Exchange::check_waiting_for(int peer) {
  engine_.throw_if_aborted(operation_);
  abort_if_departed(peer);
  engine_.check_stalled(peer, operation_, sequence_);
  if (std::chrono::steady_clock::now() >= deadline_) {
    engine_.abort(operation_ + " timed out after " +
                      std::to_string(engine_.settings().timeout.count()) + " ms waiting for rank " +
                      std::to_string(peer),
                  peer);
  }
  engine_.throw_if_aborted(operation_);
}

void Exchange::wait_all() {
  std::vector<std::size_t> finished;
  while (unreported_ != 0) wait_some(finished);
  engine_.throw_if_aborted(operation_);
}

}  // namespace tessera::ucx
