#include "tcp_store.hpp"

#include <unistd.h>

#include <algorithm>
#include <climits>
#include <cstdlib>

#include "protocol.hpp"
#include "tessera/base/error.hpp"

namespace tessera::tcp {

namespace {

std::string environment(const char* name) {
  const char* value = std::getenv(name);
  return value == nullptr ? std::string() : std::string(value);
}

// What a client should dial to reach a server bound to `host`.
std::string dialable(const std::string& host) {
  if (host == "0.0.0.0") return "127.0.0.1";
  if (host == "::") return "::1";
  return host;
}

Duration bounded(Duration timeout) {
  return std::clamp(timeout, Duration(0), Duration(kMaxWaitMs));
}

// Parses the reply's status; throws what the server's answer means for `what`.
FrameReader open_reply(const std::string& reply, std::string_view what) {
  FrameReader in(reply);
  const auto status = static_cast<Status>(in.u8());
  if (status == Status::ok) return in;
  if (status == Status::bad_request) throw InvalidArgument("tcp store: " + in.str());
  throw Error("tcp store: unexpected answer to " + std::string(what));
}

std::int64_t lease_number(LeaseId lease) {
  return static_cast<std::int64_t>(lease);
}

LeaseExpired expired(const std::string& what, LeaseId lease) {
  return LeaseExpired("tcp store: " + what + " under lease " + std::to_string(lease_number(lease)) +
                          ", which the server has let expire or revoked (or a restarted server "
                          "never knew): its keys are gone; take a new lease and join again",
                      lease);
}

}  // namespace

TcpStoreSettings resolve_settings(const Options& options) {
  TcpStoreSettings s;
  s.serve = options.get_bool("serve");
  s.host = options.get_string("host");
  const auto port = options.get_int("port");
  if (port < 0 || port > 65535)
    throw ConfigError("store.tcp.port: " + std::to_string(port) + " is not a TCP port (0-65535)");
  s.port = static_cast<std::uint16_t>(port);
  s.token = options.get_string("token");
  s.timeout = options.get_duration("timeout");
  const auto max_pending = options.get_int("max_pending");
  if (max_pending < 1 || max_pending > 65536)
    throw ConfigError("store.tcp.max_pending: " + std::to_string(max_pending) +
                      " is not a connection count in 1-65536");
  s.pending.max_pending = static_cast<std::size_t>(max_pending);
  s.pending.hello_timeout =
      std::chrono::duration_cast<std::chrono::milliseconds>(options.get_duration("hello_timeout"));
  if (s.pending.hello_timeout <= std::chrono::milliseconds(0))
    throw ConfigError("store.tcp.hello_timeout: must be longer than 0 ms");

  if (s.serve) {
    if (s.host.empty()) s.host = "127.0.0.1";
  } else if (s.host.empty() && s.port == 0) {
    const auto address = environment("TESSERA_STORE_ADDR");
    if (address.empty())
      throw ConfigError(
          "store.tcp: no server to reach: set options host and port, or TESSERA_STORE_ADDR "
          "(`tessera launch` sets it for its workers)");
    std::tie(s.host, s.port) = split_address(address, "TESSERA_STORE_ADDR");
  } else if (s.host.empty() || s.port == 0) {
    throw ConfigError(
        "store.tcp: a client needs both host and port (or neither, to read "
        "TESSERA_STORE_ADDR)");
  }
  if (s.token.empty()) s.token = environment("TESSERA_STORE_TOKEN");
  if (s.token.empty())
    throw ConfigError(
        "store.tcp: no token: set option token or TESSERA_STORE_TOKEN (every rank "
        "of a job presents the same random token)");
  if (s.token.size() > kMaxTokenBytes)
    throw ConfigError("store.tcp: the token (option token or TESSERA_STORE_TOKEN) has " +
                      std::to_string(s.token.size()) + " bytes; the server accepts at most " +
                      std::to_string(kMaxTokenBytes) + ": use a shorter one");
  return s;
}

TcpStore::TcpStore(const Options& options) : TcpStore(resolve_settings(options)) {}

TcpStore::TcpStore(const TcpStoreSettings& settings) {
  std::string host = settings.host;
  std::uint16_t port = settings.port;
  if (settings.serve) {
    server_ = std::make_unique<StoreServer>(settings.host, settings.port, settings.token,
                                            settings.pending);
    port = server_->port();
    host = dialable(settings.host);
  }
  client_ = std::make_unique<StoreClient>(host, port, settings.token, settings.timeout);
}

std::string TcpStore::address() const {
  if (server_ && (server_->host() == "0.0.0.0" || server_->host() == "::")) {
    // Bound to every interface: other hosts need this machine's name, not a wildcard.
    char name[HOST_NAME_MAX + 1] = {};
    if (::gethostname(name, sizeof name - 1) == 0)
      return std::string(name) + ":" + std::to_string(server_->port());
  }
  return client_->address();
}

void TcpStore::set(const std::string& key, const std::string& value) {
  const auto frame =
      FrameWriter().u8(static_cast<std::uint8_t>(Command::set)).str(key).str(value).take();
  (void)open_reply(client_->request(frame, Duration::zero(), true), "set");
}

void TcpStore::set(const std::string& key, const std::string& value, LeaseId lease) {
  const auto frame = FrameWriter()
                         .u8(static_cast<std::uint8_t>(Command::set_leased))
                         .str(key)
                         .str(value)
                         .i64(lease_number(lease))
                         .take();
  if (open_reply(client_->request(frame, Duration::zero(), true), "set").i64() == 0)
    throw expired("set of key '" + key + "'", lease);
}

std::string TcpStore::get(const std::string& key, Duration timeout) {
  timeout = bounded(timeout);
  const auto frame = FrameWriter()
                         .u8(static_cast<std::uint8_t>(Command::get))
                         .str(key)
                         .i64(timeout.count())
                         .take();
  const auto reply = client_->request(frame, timeout, true);
  if (!reply.empty() && static_cast<Status>(reply[0]) == Status::timeout)
    throw Timeout("tcp store: key '" + key + "' did not appear within " +
                  std::to_string(timeout.count()) + " ms");
  return open_reply(reply, "get").str();
}

std::int64_t TcpStore::add(const std::string& key, std::int64_t delta) {
  const auto frame =
      FrameWriter().u8(static_cast<std::uint8_t>(Command::add)).str(key).i64(delta).take();
  return open_reply(client_->request(frame, Duration::zero(), false), "add").i64();
}

std::string TcpStore::compare_set(const std::string& key, const std::string& expected,
                                  const std::string& desired) {
  const auto frame = FrameWriter()
                         .u8(static_cast<std::uint8_t>(Command::compare_set))
                         .str(key)
                         .str(expected)
                         .str(desired)
                         .take();
  // Resending is safe: a compare_set that already applied finds `desired` and returns it.
  return open_reply(client_->request(frame, Duration::zero(), true), "compare_set").str();
}

void TcpStore::wait(const std::vector<std::string>& keys, Duration timeout) {
  timeout = bounded(timeout);
  FrameWriter out;
  out.u8(static_cast<std::uint8_t>(Command::wait))
      .i64(timeout.count())
      .i64(static_cast<std::int64_t>(keys.size()));
  for (const auto& key : keys) out.str(key);
  const auto reply = client_->request(out.take(), timeout, true);
  if (!reply.empty() && static_cast<Status>(reply[0]) == Status::timeout) {
    FrameReader in(reply);
    in.u8();
    std::string missing;
    for (auto n = in.i64(); n > 0; --n) missing += (missing.empty() ? "'" : ", '") + in.str() + "'";
    throw Timeout("tcp store: waited " + std::to_string(timeout.count()) +
                  " ms; keys still missing: " + missing);
  }
  (void)open_reply(reply, "wait");
}

std::optional<std::string> TcpStore::wait_for_change(const std::string& key,
                                                     const std::optional<std::string>& known,
                                                     Duration timeout) {
  timeout = bounded(timeout);
  const auto frame = FrameWriter()
                         .u8(static_cast<std::uint8_t>(Command::watch))
                         .str(key)
                         .i64(known ? 1 : 0)
                         .str(known.value_or(std::string()))
                         .i64(timeout.count())
                         .take();
  const auto reply = client_->request(frame, timeout, true);
  if (!reply.empty() && static_cast<Status>(reply[0]) == Status::timeout)
    throw Timeout("tcp store: key '" + key + "' did not change within " +
                  std::to_string(timeout.count()) + " ms");
  auto in = open_reply(reply, "watch");
  const bool present = in.i64() != 0;
  auto value = in.str();
  if (!present) return std::nullopt;
  return value;
}

std::vector<std::pair<std::string, std::string>> TcpStore::list(const std::string& prefix) {
  const auto frame = FrameWriter().u8(static_cast<std::uint8_t>(Command::list)).str(prefix).take();
  const auto reply = client_->request(frame, Duration::zero(), true);
  auto in = open_reply(reply, "list");  // reads from `reply`: keep it alive
  std::vector<std::pair<std::string, std::string>> found;
  for (auto n = in.i64(); n > 0; --n) {
    auto key = in.str();
    found.emplace_back(std::move(key), in.str());
  }
  return found;
}

bool TcpStore::check(const std::string& key) {
  const auto frame = FrameWriter().u8(static_cast<std::uint8_t>(Command::check)).str(key).take();
  return open_reply(client_->request(frame, Duration::zero(), true), "check").i64() != 0;
}

bool TcpStore::remove(const std::string& key) {
  const auto frame = FrameWriter().u8(static_cast<std::uint8_t>(Command::remove)).str(key).take();
  return open_reply(client_->request(frame, Duration::zero(), false), "remove").i64() != 0;
}

LeaseId TcpStore::grant_lease(Duration ttl) {
  if (ttl < Duration(1) || ttl > Duration(kMaxWaitMs))
    throw InvalidArgument("tcp store: a lease of " + std::to_string(ttl.count()) +
                          " ms; a lease lasts between 1 ms and 30 days");
  const auto frame =
      FrameWriter().u8(static_cast<std::uint8_t>(Command::grant_lease)).i64(ttl.count()).take();
  // Resending is safe: a grant whose reply was lost leaves a lease without keys, which ends
  // by itself after ttl.
  return LeaseId{open_reply(client_->request(frame, Duration::zero(), true), "grant_lease").i64()};
}

void TcpStore::keep_alive(LeaseId lease) {
  const auto frame = FrameWriter()
                         .u8(static_cast<std::uint8_t>(Command::keep_alive))
                         .i64(lease_number(lease))
                         .take();
  if (open_reply(client_->request(frame, Duration::zero(), true), "keep_alive").i64() == 0)
    throw expired("keep_alive", lease);
}

void TcpStore::revoke_lease(LeaseId lease) {
  const auto frame = FrameWriter()
                         .u8(static_cast<std::uint8_t>(Command::revoke_lease))
                         .i64(lease_number(lease))
                         .take();
  // Resending is safe: revoking a lease that has ended does nothing.
  (void)open_reply(client_->request(frame, Duration::zero(), true), "revoke_lease");
}

}  // namespace tessera::tcp
