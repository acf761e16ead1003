#include "server_state.hpp"

#include <algorithm>
#include <charconv>

namespace tessera::tcp {

namespace {

constexpr std::size_t kReadChunk = 64 * 1024;

std::string reply(Status status) {
  return FrameWriter().u8(static_cast<std::uint8_t>(status)).take();
}

}  // namespace

std::size_t ServerState::receive_budget(const Session& session) noexcept {
  if (session.closing) return 0;
  if (!session.admitted)
    return session.in.size() > kMaxHelloBytes ? 0 : kMaxHelloBytes + 1 - session.in.size();
  return kReadChunk;
}

bool ServerState::receive(Session& session, std::string_view bytes) {
  if (session.closing) return false;
  session.in.append(bytes);
  bool changed = false;
  try {
    while (!session.closing) {
      if (!session.admitted && session.in.size() > kMaxHelloBytes)
        throw ProtocolViolation("more than " + std::to_string(kMaxHelloBytes) +
                                " bytes before the hello");
      if (session.in.size() < kFrameHeaderBytes) break;
      const auto length = frame_length(session.in.data());
      const std::size_t limit = session.admitted ? kMaxFrameBytes : kMaxHelloBytes;
      if (length > limit - (session.admitted ? 0 : kFrameHeaderBytes))
        throw ProtocolViolation("a frame of " + std::to_string(length) + " bytes");
      if (session.in.size() < kFrameHeaderBytes + length) break;
      // A client sends its next request only after the reply: a request behind a parked one
      // is a protocol violation.
      if (session.parked) throw ProtocolViolation("a request while another is pending");
      const std::string payload = session.in.substr(kFrameHeaderBytes, length);
      session.in.erase(0, kFrameHeaderBytes + length);
      changed = handle(session, payload) || changed;
    }
  } catch (const ProtocolViolation&) {
    throw;
  } catch (const Error& e) {  // a truncated field, an unknown command
    throw ProtocolViolation(e.what());
  }
  if (session.closing) session.in.clear();
  return changed;
}

bool ServerState::handle(Session& c, std::string_view payload) {
  FrameReader in(payload);
  const auto command = static_cast<Command>(in.u8());
  if (!c.admitted) {
    const bool ok = command == Command::hello && in.i64() == kMagic &&
                    in.i64() == kProtocolVersion && in.str() == token_;
    c.out += ok ? reply(Status::ok)
                : FrameWriter()
                      .u8(static_cast<std::uint8_t>(Status::refused))
                      .i64(kProtocolVersion)
                      .take();
    c.admitted = ok;
    c.closing = !ok;
    return false;
  }
  const auto now = Clock::now();
  const bool expired = expire_leases(now);
  switch (command) {
    case Command::set: {
      auto key = in.str();
      bind(key, 0).value = in.str();
      c.out += reply(Status::ok);
      return true;
    }
    case Command::set_leased: {
      auto key = in.str();
      auto value = in.str();
      const auto lease = in.i64();
      const bool alive = leases_.contains(lease);
      if (alive) bind(key, lease).value = std::move(value);
      c.out += FrameWriter().u8(static_cast<std::uint8_t>(Status::ok)).i64(alive ? 1 : 0).take();
      return alive || expired;
    }
    case Command::get: {
      auto key = in.str();
      const auto timeout = std::chrono::milliseconds(in.i64());
      park(c, Parked{Command::get, {std::move(key)}, std::nullopt, {}}, timeout);
      return expired;
    }
    case Command::add: {
      const auto key = in.str();  // separate statements: argument order is unspecified
      return add(c, key, in.i64()) || expired;
    }
    case Command::compare_set: {
      auto key = in.str();
      auto expected = in.str();
      auto desired = in.str();
      const auto found = data_.find(key);
      const bool matches =
          found == data_.end() ? expected.empty() : found->second.value == expected;
      if (matches) data_[key].value = std::move(desired);
      const auto after = data_.find(key);
      c.out += FrameWriter()
                   .u8(static_cast<std::uint8_t>(Status::ok))
                   .str(after == data_.end() ? std::string() : after->second.value)
                   .take();
      return matches || expired;
    }
    case Command::wait: {
      const auto timeout = std::chrono::milliseconds(in.i64());
      const auto count = in.i64();
      if (count < 0 || static_cast<std::uint64_t>(count) > payload.size())
        throw ProtocolViolation("a wait for " + std::to_string(count) + " keys");
      std::vector<std::string> keys;
      for (std::int64_t i = 0; i < count; ++i) keys.push_back(in.str());
      park(c, Parked{Command::wait, std::move(keys), std::nullopt, {}}, timeout);
      return expired;
    }
    case Command::watch: {
      auto key = in.str();
      const auto present = in.i64();
      auto known = in.str();
      const auto timeout = std::chrono::milliseconds(in.i64());
      std::optional<std::string> value;
      if (present != 0) value = std::move(known);
      park(c, Parked{Command::watch, {std::move(key)}, std::move(value), {}}, timeout);
      return expired;
    }
    case Command::list: {
      list(c, in.str());
      return expired;
    }
    case Command::check:
    case Command::remove: {
      const auto key = in.str();
      const bool existed = data_.contains(key);
      if (existed && command == Command::remove) erase(key);
      c.out += FrameWriter().u8(static_cast<std::uint8_t>(Status::ok)).i64(existed ? 1 : 0).take();
      return (existed && command == Command::remove) || expired;
    }
    case Command::grant_lease: {
      const auto ttl = in.i64();
      if (ttl < 1 || ttl > kMaxWaitMs) {
        c.out += FrameWriter()
                     .u8(static_cast<std::uint8_t>(Status::bad_request))
                     .str("grant_lease: a lease of " + std::to_string(ttl) +
                          " ms; a lease lasts between 1 ms and 30 days")
                     .take();
        return expired;
      }
      const auto lease = ++last_lease_;
      leases_[lease] = Lease{std::chrono::milliseconds(ttl), {}, {}};
      renew(lease, now);
      c.out += FrameWriter().u8(static_cast<std::uint8_t>(Status::ok)).i64(lease).take();
      return expired;
    }
    case Command::keep_alive:
    case Command::revoke_lease: {
      const auto lease = in.i64();
      const bool alive = leases_.contains(lease);
      if (alive && command == Command::keep_alive) renew(lease, now);
      if (alive && command == Command::revoke_lease) end_lease(lease);
      c.out += FrameWriter().u8(static_cast<std::uint8_t>(Status::ok)).i64(alive ? 1 : 0).take();
      return (alive && command == Command::revoke_lease) || expired;
    }
    case Command::hello: break;
  }
  throw ProtocolViolation("an unknown command");
}

bool ServerState::add(Session& c, const std::string& key, std::int64_t delta) {
  std::int64_t value = 0;
  if (const auto found = data_.find(key); found != data_.end()) {
    const auto& text = found->second.value;
    const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), value);
    if (ec != std::errc() || end != text.data() + text.size()) {
      c.out += FrameWriter()
                   .u8(static_cast<std::uint8_t>(Status::bad_request))
                   .str("add: key '" + key + "' holds '" + text + "', not an integer")
                   .take();
      return false;
    }
  }
  if (__builtin_add_overflow(value, delta, &value)) {
    c.out += FrameWriter()
                 .u8(static_cast<std::uint8_t>(Status::bad_request))
                 .str("add: key '" + key + "' holds " + data_.at(key).value + ", adding " +
                      std::to_string(delta) + " overflows a 64-bit integer")
                 .take();
    return false;
  }
  data_[key].value = std::to_string(value);
  c.out += FrameWriter().u8(static_cast<std::uint8_t>(Status::ok)).i64(value).take();
  return true;
}

void ServerState::list(Session& c, const std::string& prefix) {
  // Sized first: a reply over the frame limit is refused rather than cut.
  std::size_t bytes = 1 + 8;
  const auto first = data_.lower_bound(prefix);
  auto last = first;
  std::int64_t count = 0;
  for (; last != data_.end() && last->first.starts_with(prefix); ++last, ++count)
    bytes += 8 + last->first.size() + last->second.value.size();
  if (bytes > kMaxFrameBytes) {
    c.out += FrameWriter()
                 .u8(static_cast<std::uint8_t>(Status::bad_request))
                 .str("list: the " + std::to_string(count) + " keys under prefix '" + prefix +
                      "' hold " + std::to_string(bytes) + " bytes, more than one reply carries (" +
                      std::to_string(kMaxFrameBytes) + "); list a narrower prefix")
                 .take();
    return;
  }
  FrameWriter out;
  out.u8(static_cast<std::uint8_t>(Status::ok)).i64(count);
  for (auto it = first; it != last; ++it) out.str(it->first).str(it->second.value);
  c.out += out.take();
}

ServerState::Entry& ServerState::bind(const std::string& key, std::int64_t lease) {
  auto& entry = data_[key];
  if (entry.lease == lease) return entry;
  if (const auto old = leases_.find(entry.lease); old != leases_.end()) old->second.keys.erase(key);
  if (const auto next = leases_.find(lease); next != leases_.end()) next->second.keys.insert(key);
  entry.lease = lease;
  return entry;
}

void ServerState::erase(const std::string& key) {
  const auto found = data_.find(key);
  if (found == data_.end()) return;
  if (const auto lease = leases_.find(found->second.lease); lease != leases_.end())
    lease->second.keys.erase(key);
  data_.erase(found);
}

void ServerState::end_lease(std::int64_t lease) {
  const auto found = leases_.find(lease);
  if (found == leases_.end()) return;
  for (const auto& key : found->second.keys) data_.erase(key);
  deadlines_.erase({found->second.deadline, lease});
  leases_.erase(found);
}

void ServerState::renew(std::int64_t lease, Clock::time_point now) {
  auto& l = leases_.at(lease);
  deadlines_.erase({l.deadline, lease});
  l.deadline = now + l.ttl;
  deadlines_.emplace(l.deadline, lease);
}

bool ServerState::expire_leases(Clock::time_point now) {
  bool deleted = false;
  while (!deadlines_.empty() && deadlines_.begin()->first <= now) {
    const auto lease = deadlines_.begin()->second;
    deleted = !leases_.at(lease).keys.empty() || deleted;
    end_lease(lease);
  }
  return deleted;
}

std::optional<Clock::time_point> ServerState::next_lease_deadline() const {
  if (deadlines_.empty()) return std::nullopt;
  return deadlines_.begin()->first;
}

void ServerState::park(Session& c, Parked parked, std::chrono::milliseconds timeout) {
  timeout =
      std::clamp(timeout, std::chrono::milliseconds(0), std::chrono::milliseconds(kMaxWaitMs));
  parked.deadline = Clock::now() + timeout;
  c.parked = std::move(parked);
  answer_parked(c);
}

void ServerState::answer_parked(Session& c) {
  if (!c.parked) return;
  FrameWriter out;
  out.u8(static_cast<std::uint8_t>(Status::ok));
  if (c.parked->command == Command::watch) {
    const auto found = data_.find(c.parked->keys.front());
    const bool present = found != data_.end();
    if (present ? c.parked->known == found->second.value : !c.parked->known) return;
    out.i64(present ? 1 : 0).str(present ? found->second.value : std::string());
  } else {
    for (const auto& key : c.parked->keys)
      if (!data_.contains(key)) return;
    if (c.parked->command == Command::get) out.str(data_.at(c.parked->keys.front()).value);
  }
  c.out += out.take();
  c.parked.reset();
}

void ServerState::expire_parked(Session& c, Clock::time_point now) {
  if (!c.parked || c.parked->deadline > now) return;
  FrameWriter out;
  out.u8(static_cast<std::uint8_t>(Status::timeout));
  std::vector<std::string> missing;
  if (c.parked->command != Command::watch)
    for (const auto& key : c.parked->keys)
      if (!data_.contains(key)) missing.push_back(key);
  out.i64(static_cast<std::int64_t>(missing.size()));
  for (const auto& key : missing) out.str(key);
  c.out += out.take();
  c.parked.reset();
}

}  // namespace tessera::tcp
