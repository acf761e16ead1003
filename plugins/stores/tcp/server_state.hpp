#pragma once
// The tcp store server's protocol state, apart from sockets and poll(): what a connection may
// send before and after it is admitted, what each request does to the key-value data and what
// is answered. StoreServer (server.cpp) only moves bytes between sockets and Sessions, so the
// same code is what the fuzz target (tests/fuzz/tcp_store_fuzz.cpp) drives with arbitrary bytes.

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "protocol.hpp"
#include "socket.hpp"

namespace tessera::tcp {

// A get or a wait on keys that do not exist yet, answered when they do or at the deadline; or
// a watch, answered when its key's value differs from `known` (nullopt: absent).
struct Parked {
  Command command = Command::get;
  std::vector<std::string> keys;
  std::optional<std::string> known;
  Clock::time_point deadline;
};

// One connection's protocol state.
struct Session {
  std::string in;   // received, not yet handled
  std::string out;  // replies not yet sent
  bool admitted = false;
  bool closing = false;  // refused: close once `out` is flushed, discard further input
  std::optional<Parked> parked;
};

// The connection broke the protocol (or a limit): drop it at once, without a reply.
class ProtocolViolation : public Error {
 public:
  using Error::Error;
};

class ServerState {
 public:
  // Lease ids count up from first_lease_id + 1: the server starts from a random number, so that
  // a lease of a server that restarted is unlikely to name a new one; the fuzz target from 0.
  ServerState(std::string token, std::int64_t first_lease_id)
      : token_(std::move(token)), last_lease_(first_lease_id) {}

  // How many more bytes `session` may hand to receive() now. Before admission only what fits
  // in kMaxHelloBytes (plus one, so that a longer hello is seen and refused); after, one read
  // chunk at a time, frames being bounded by kMaxFrameBytes. 0 for a closing session.
  [[nodiscard]] static std::size_t receive_budget(const Session& session) noexcept;

  // Appends `bytes` to the session's input and handles every complete frame in it, appending
  // replies to session.out. Returns true when the data changed, so that requests parked on
  // other sessions may be answerable now (answer_parked). Throws ProtocolViolation when the
  // connection must be dropped: a frame over its limit, a malformed request, a request while
  // another is pending. A first frame other than a hello with the right magic, version and
  // token is answered `refused` and the session is marked closing.
  bool receive(Session& session, std::string_view bytes);

  // Answers the session's parked request if it is answerable now: every key it waits for
  // exists, or the watched value changed.
  void answer_parked(Session& session);

  // Answers the session's parked request with a timeout (and the keys still missing) when its
  // deadline is not after `now`.
  void expire_parked(Session& session, Clock::time_point now);

  // Ends every lease whose deadline is not after `now`, deleting its keys. Returns true when
  // keys were deleted, so that parked requests may be answerable now. receive() calls it
  // before each request, so no request sees an expired lease; the server's loop calls it at
  // next_lease_deadline() so that watchers wake when nothing else happens.
  bool expire_leases(Clock::time_point now);
  [[nodiscard]] std::optional<Clock::time_point> next_lease_deadline() const;

  [[nodiscard]] std::size_t key_count() const noexcept { return data_.size(); }

 private:
  struct Entry {
    std::string value;
    std::int64_t lease = 0;  // 0: not bound
  };
  struct Lease {
    std::chrono::milliseconds ttl;
    Clock::time_point deadline;
    std::set<std::string> keys;
  };

  bool handle(Session& session, std::string_view payload);
  bool add(Session& session, const std::string& key, std::int64_t delta);
  void list(Session& session, const std::string& prefix);
  void park(Session& session, Parked parked, std::chrono::milliseconds timeout);
  // The entry of key, created if absent, bound to `lease` (0: unbound).
  Entry& bind(const std::string& key, std::int64_t lease);
  void erase(const std::string& key);
  void end_lease(std::int64_t lease);
  void renew(std::int64_t lease, Clock::time_point now);

  std::string token_;
  std::map<std::string, Entry> data_;
  std::map<std::int64_t, Lease> leases_;
  std::set<std::pair<Clock::time_point, std::int64_t>> deadlines_;  // of leases_, soonest first
  std::int64_t last_lease_;
};

}  // namespace tessera::tcp
