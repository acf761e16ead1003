#pragma once
// Exchange: the messages of one collective. Posts tagged sends and receives on the engine's
// worker and waits for them with the operation's deadline, failing with a TransportError that
// names the operation and the rank at fault: a peer that died, the ranks still not heard
// from at the deadline, or whoever aborted the group.

#include <chrono>
#include <cstdint>
#include <deque>
#include <string>
#include <vector>

#include "engine.hpp"

namespace tessera::ucx {

class Exchange {
 public:
  Exchange(Engine& engine, std::string operation, std::uint64_t sequence);
  ~Exchange();  // requests still in flight (after an error) go to the engine
  Exchange(const Exchange&) = delete;
  Exchange& operator=(const Exchange&) = delete;

  // `step` tells apart the messages a peer sends within this collective.
  std::size_t send(int peer, const void* data, std::size_t bytes, std::uint32_t step);
  std::size_t recv(int peer, void* data, std::size_t bytes, std::uint32_t step);

  // Blocks until at least one request not reported before has finished and appends the ids of
  // all such; returns at once with nothing when every request was reported.
  void wait_some(std::vector<std::size_t>& finished);
  void wait_all();
  // Every request posted so far has finished and been reported.
  [[nodiscard]] bool done() const noexcept { return unreported_ == 0; }

  // For waits on something other than this exchange's requests (mapped memory): fails the
  // group as wait_some does once `peer` has left, is stalled (Engine::check_stalled) or the
  // deadline has passed, naming `peer`.
  void check_waiting_for(int peer);

  [[nodiscard]] Engine& engine() noexcept { return engine_; }
  [[nodiscard]] const std::string& operation() const noexcept { return operation_; }

 private:
  [[noreturn]] void fail_at_deadline();
  // Aborts the group, naming `peer`, if it destroyed its communicator.
  void abort_if_departed(int peer);
  void check(Request& request);

  Engine& engine_;
  const std::string operation_;
  const std::uint64_t sequence_;
  const Deadline deadline_;
  std::chrono::steady_clock::time_point next_stall_check_{};
  std::deque<Request> requests_;
  std::vector<bool> reported_;
  std::vector<std::size_t> unreported_ids_;  // in posting order; scanned by wait_some
  std::size_t unreported_ = 0;
};

}  // namespace tessera::ucx
