#pragma once
// The tcp store server's protocol state, apart from sockets and poll(): what a connection may
// send before and after it is admitted, what each request does to the key-value data and what
// is answered. StoreServer (server.cpp) only moves bytes between sockets and Sessions, so the
// same code is what the fuzz target (tests/fuzz/tcp_store_fuzz.cpp) drives with arbitrary bytes.

#include <chrono>
#include <cstddef>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "protocol.hpp"
#include "socket.hpp"

namespace tessera::tcp {

// A get or a wait on keys that do not exist yet, answered when they do or at the deadline.
struct Parked {
  Command command = Command::get;
  std::vector<std::string> keys;
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
  explicit ServerState(std::string token) : token_(std::move(token)) {}

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

  // Answers the session's parked request if every key it waits for exists now.
  void answer_parked(Session& session);

  // Answers the session's parked request with a timeout (and the keys still missing) when its
  // deadline is not after `now`.
  void expire_parked(Session& session, Clock::time_point now);

  [[nodiscard]] std::size_t key_count() const noexcept { return data_.size(); }

 private:
  bool handle(Session& session, std::string_view payload);
  bool add(Session& session, const std::string& key, std::int64_t delta);
  void park(Session& session, Command command, std::vector<std::string> keys,
            std::chrono::milliseconds timeout);

  std::string token_;
  std::map<std::string, std::string> data_;
};

}  // namespace tessera::tcp
