#pragma once
// LocalGroup: the state the ranks of one local communicator share — what each rank publishes
// for the current collective, the barrier between phases, the point-to-point mailboxes, and
// the abort flag. Every wait here has a deadline and wakes on abort.

#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <tuple>
#include <vector>

#include "tessera/transport_kit/reduce.hpp"
#include "tessera/transport_kit/transport_support.hpp"

namespace tessera::local {

class LocalGroup;

// What an operation must agree on across ranks; compared after the first barrier so that a
// program issuing different collectives on different ranks fails loudly instead of mixing them.
struct OpSignature {
  std::string operation;
  DType dtype = DType::f32;
  std::size_t count = 0;
  ReduceOp op = ReduceOp::sum;
  int root = -1;

  [[nodiscard]] std::string describe() const;
  friend bool operator==(const OpSignature&, const OpSignature&) = default;
};

// What a rank publishes for the collective it is in. Written by its owner before a barrier,
// read by peers between that barrier and the next.
struct Contribution {
  OpSignature signature;
  const std::byte* input = nullptr;
  std::byte* output = nullptr;
  int color = 0;                      // split
  int key = 0;                        // split
  std::shared_ptr<LocalGroup> child;  // split: the new group, set by its leader
};

// A deadline plus what to call the operation in errors.
struct OpContext {
  std::string operation;  // "all_reduce", "recv(from 2, tag 7)"
  int rank = 0;
  Deadline deadline;
  Duration timeout{};
};

// An eager send: the payload is copied out at send time, so a send never waits for its recv
// and a ring of sends issued before recvs cannot deadlock.
struct Message {
  DType dtype = DType::f32;
  std::size_t count = 0;
  std::vector<std::byte> payload;
};

class LocalGroup {
 public:
  explicit LocalGroup(int size);

  [[nodiscard]] int size() const noexcept { return size_; }
  [[nodiscard]] Contribution& slot(int rank) { return slots_[static_cast<std::size_t>(rank)]; }

  // Connect: blocks until every rank has joined. Throws Timeout naming the ranks that never
  // came (and aborts the group, so late ranks fail rather than wait), or TransportError if the
  // rank joined twice or the group was aborted.
  void join(const OpContext& context);

  // Barrier between the phases of a collective. Throws TransportError naming the missing
  // ranks and the operation at the deadline (aborting the group), or on abort.
  void arrive_and_wait(const OpContext& context);

  // Throws TransportError if the group was aborted.
  void check_alive(const OpContext& context);

  // Fails every current and later wait in the group with `reason`. Idempotent; keeps the first.
  void abort(const std::string& reason) noexcept;

  void post(int source, int destination, std::uint32_t tag, Message message);
  // Waits for the oldest message from source to destination with tag. Throws TransportError
  // naming the source at the deadline (aborting the group), or on abort.
  [[nodiscard]] Message take(int source, int destination, std::uint32_t tag,
                             const OpContext& context);

 private:
  // Returns the ranks still missing at the deadline (empty: everyone arrived).
  std::vector<int> wait_for_everyone(std::unique_lock<std::mutex>& lock, const OpContext& context);
  void throw_if_aborted(const OpContext& context) const;
  void abort_locked(const std::string& reason);

  const int size_;
  std::vector<Contribution> slots_;

  std::mutex mutex_;
  std::condition_variable changed_;
  std::optional<std::string> abort_reason_;
  std::uint64_t generation_ = 0;                 // barriers completed
  int arrived_ = 0;                              // ranks in the current barrier
  std::vector<std::uint64_t> barriers_entered_;  // per rank
  std::vector<bool> joined_;
  std::map<std::tuple<int, int, std::uint32_t>, std::deque<Message>> mailboxes_;
};

// "2" or "1, 3" for messages.
[[nodiscard]] std::string rank_list(const std::vector<int>& ranks);

}  // namespace tessera::local
