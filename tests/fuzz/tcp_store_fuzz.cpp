// Fuzz target: the tcp store server's handling of what clients send (protocol.cpp frames,
// server_state.cpp requests), without sockets. The input is a script of chunks, each sent on
// one of three connections, so that partial frames, interleaved clients, parked requests and
// their wake-ups (by writes and by the end of leases) are all reached. The server may drop a
// connection (ProtocolViolation) and must never buffer more than its limits allow before admission,
// nor answer with a frame a client cannot read.

#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string>

#include "fuzz_support.hpp"
#include "protocol.hpp"
#include "server_state.hpp"

namespace {

using tessera::tcp::Session;

constexpr std::size_t kSessions = 3;

// Every reply in `out` is a whole, readable frame starting with a known status.
void check_replies(const std::string& out) {
  std::size_t at = 0;
  while (at < out.size()) {
    if (out.size() - at < tessera::tcp::kFrameHeaderBytes) std::abort();
    const auto length = tessera::tcp::frame_length(out.data() + at);
    if (length == 0 || length > tessera::tcp::kMaxFrameBytes ||
        out.size() - at - tessera::tcp::kFrameHeaderBytes < length)
      std::abort();
    if (static_cast<std::uint8_t>(out[at + tessera::tcp::kFrameHeaderBytes]) > 3) std::abort();
    at += tessera::tcp::kFrameHeaderBytes + length;
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  // Lease ids count from 1, so that seeds can renew, bind and revoke the leases they grant.
  tessera::tcp::ServerState state("token", 0);
  Session sessions[kSessions];
  auto now = tessera::tcp::Clock::now();
  // Script: [connection byte][length byte][length bytes]... A connection byte with its high
  // bit set first advances the clock (ending leases, expiring parked requests) by its low bits
  // in seconds.
  std::size_t at = 0;
  while (at + 2 <= size) {
    const std::uint8_t which = data[at];
    std::size_t length = data[at + 1];
    at += 2;
    length = std::min(length, size - at);
    const std::string_view chunk(reinterpret_cast<const char*>(data + at), length);
    at += length;
    if (which & 0x80) {
      now += std::chrono::seconds(which & 0x7f);
      if (state.expire_leases(now))
        for (auto& s : sessions) state.answer_parked(s);
      for (auto& s : sessions) state.expire_parked(s, now);
    }
    auto& session = sessions[which % kSessions];
    // As the server does: no more than the budget is read at once.
    const std::size_t budget = tessera::tcp::ServerState::receive_budget(session);
    try {
      if (state.receive(session, chunk.substr(0, std::min(budget, chunk.size()))))
        for (auto& s : sessions) state.answer_parked(s);
    } catch (const tessera::tcp::ProtocolViolation&) {
      session = Session();  // dropped; the slot takes a new connection
      continue;
    }
    if (!session.admitted && session.in.size() > tessera::tcp::kMaxHelloBytes) std::abort();
    if (session.closing && !session.in.empty()) std::abort();
    check_replies(session.out);
    session.out.clear();  // sent
  }
  for (auto& s : sessions) check_replies(s.out);
  return 0;
}
