#pragma once
// The wire format between tcp store clients and the server.
//
// Every message is a frame: a 4-byte big-endian payload length, then the payload. A payload
// starts with one byte (a Command from the client, a Status from the server), followed by
// fields: integers as 8-byte big-endian two's complement, strings as a 4-byte big-endian
// length and the bytes. The first frame of every connection is `hello` carrying kMagic,
// kProtocolVersion and the job token; the server answers `ok`, or `refused` and closes.
// Clients send one request at a time per connection and read its reply before the next.
// A refused hello's reply carries the server's protocol version after the status, so that a
// client can tell a version mismatch from a wrong token.

#include <cstdint>
#include <string>
#include <string_view>

#include "tessera/plugin/store.hpp"

namespace tessera::tcp {

inline constexpr std::int64_t kMagic = 0x7465737365726131;  // "tessera1"
// 2: leases, watch and list (tessera ABI 2).
inline constexpr std::int64_t kProtocolVersion = 2;
// A bound on what one frame may claim, so a stray or a buggy peer cannot make either side
// allocate GBs. Rendezvous values are addresses and small records; 64 MiB is far above them.
inline constexpr std::uint32_t kMaxFrameBytes = 64u << 20;
// Everything a connection may send before its hello is accepted, header included: a hello
// with a token of up to kMaxTokenBytes fits, and no unauthenticated peer can make the server
// hold more.
inline constexpr std::size_t kMaxTokenBytes = 1024;
inline constexpr std::size_t kMaxHelloBytes = 4096;
inline constexpr std::size_t kFrameHeaderBytes = 4;
// Longer waits are cut to this, so deadline arithmetic on steady_clock cannot overflow; leases
// longer than this are refused.
inline constexpr std::int64_t kMaxWaitMs = kMaxStoreDuration.count();

// Requests and their replies. Leases live on the server, not on a connection: a client that
// reconnects keeps them. A watch's `present` is 0 (the key is known absent; `known` is empty)
// or 1; it is answered once the key's value differs from that.
enum class Command : std::uint8_t {
  hello = 1,          // magic, version, token
  set = 2,            // key, value                    -> ok
  get = 3,            // key, timeout_ms               -> ok value | timeout
  add = 4,            // key, delta                    -> ok new_value
  compare_set = 5,    // key, expected, desired        -> ok value_after
  wait = 6,           // timeout_ms, count, keys...    -> ok | timeout count missing_keys...
  check = 7,          // key                           -> ok 0|1
  remove = 8,         // key                           -> ok 0|1
  grant_lease = 9,    // ttl_ms                        -> ok lease | bad_request message
  keep_alive = 10,    // lease                         -> ok 1 (renewed) | ok 0 (not alive)
  revoke_lease = 11,  // lease                         -> ok 0|1 (whether it was alive)
  set_leased = 12,    // key, value, lease             -> ok 1 (set) | ok 0 (lease not alive)
  watch = 13,         // key, present, known, timeout_ms -> ok present value | timeout 0
  list = 14,          // prefix                        -> ok count (key value)... | bad_request
};

enum class Status : std::uint8_t {
  ok = 0,
  timeout = 1,
  refused = 2,      // wrong token or protocol version; the server closes the connection
  bad_request = 3,  // followed by a message; the request had no effect
};

// Builds one frame. The length prefix is filled in by take().
class FrameWriter {
 public:
  FrameWriter() : bytes_(kFrameHeaderBytes, '\0') {}
  FrameWriter& u8(std::uint8_t value);
  FrameWriter& i64(std::int64_t value);
  FrameWriter& str(std::string_view value);
  // The frame. Throws InvalidArgument when its payload exceeds kMaxFrameBytes.
  [[nodiscard]] std::string take();

 private:
  std::string bytes_;
};

// Reads the fields of one payload (without the length prefix). Throws tessera::Error when
// the payload is shorter than its fields claim.
class FrameReader {
 public:
  explicit FrameReader(std::string_view payload) : rest_(payload) {}
  std::uint8_t u8();
  std::int64_t i64();
  std::string str();
  [[nodiscard]] bool done() const noexcept { return rest_.empty(); }

 private:
  std::string_view take(std::size_t n);
  std::string_view rest_;
};

// The payload length announced by a frame header (4 bytes at `header`).
[[nodiscard]] std::uint32_t frame_length(const char* header) noexcept;

}  // namespace tessera::tcp
