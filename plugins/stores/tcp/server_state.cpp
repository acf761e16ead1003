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
    c.out += reply(ok ? Status::ok : Status::refused);
    c.admitted = ok;
    c.closing = !ok;
    return false;
  }
  switch (command) {
    case Command::set: {
      auto key = in.str();
      data_[key] = in.str();
      c.out += reply(Status::ok);
      return true;
    }
    case Command::get: {
      auto key = in.str();
      const auto timeout = std::chrono::milliseconds(in.i64());
      park(c, Command::get, {std::move(key)}, timeout);
      return false;
    }
    case Command::add: {
      const auto key = in.str();  // separate statements: argument order is unspecified
      return add(c, key, in.i64());
    }
    case Command::compare_set: {
      auto key = in.str();
      auto expected = in.str();
      auto desired = in.str();
      const auto found = data_.find(key);
      const bool matches = found == data_.end() ? expected.empty() : found->second == expected;
      if (matches) data_[key] = std::move(desired);
      const auto after = data_.find(key);
      c.out += FrameWriter()
                   .u8(static_cast<std::uint8_t>(Status::ok))
                   .str(after == data_.end() ? std::string() : after->second)
                   .take();
      return matches;
    }
    case Command::wait: {
      const auto timeout = std::chrono::milliseconds(in.i64());
      const auto count = in.i64();
      if (count < 0 || static_cast<std::uint64_t>(count) > payload.size())
        throw ProtocolViolation("a wait for " + std::to_string(count) + " keys");
      std::vector<std::string> keys;
      for (std::int64_t i = 0; i < count; ++i) keys.push_back(in.str());
      park(c, Command::wait, std::move(keys), timeout);
      return false;
    }
    case Command::check:
    case Command::remove: {
      const auto key = in.str();
      const auto found = data_.find(key);
      const bool existed = found != data_.end();
      if (existed && command == Command::remove) data_.erase(found);
      c.out += FrameWriter().u8(static_cast<std::uint8_t>(Status::ok)).i64(existed ? 1 : 0).take();
      return false;
    }
    case Command::hello: break;
  }
  throw ProtocolViolation("an unknown command");
}

bool ServerState::add(Session& c, const std::string& key, std::int64_t delta) {
  std::int64_t value = 0;
  if (const auto found = data_.find(key); found != data_.end()) {
    const auto& text = found->second;
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
                 .str("add: key '" + key + "' holds " + data_.at(key) + ", adding " +
                      std::to_string(delta) + " overflows a 64-bit integer")
                 .take();
    return false;
  }
  data_[key] = std::to_string(value);
  c.out += FrameWriter().u8(static_cast<std::uint8_t>(Status::ok)).i64(value).take();
  return true;
}

void ServerState::park(Session& c, Command command, std::vector<std::string> keys,
                       std::chrono::milliseconds timeout) {
  timeout =
      std::clamp(timeout, std::chrono::milliseconds(0), std::chrono::milliseconds(kMaxWaitMs));
  c.parked = Parked{command, std::move(keys), Clock::now() + timeout};
  answer_parked(c);
}

void ServerState::answer_parked(Session& c) {
  if (!c.parked) return;
  for (const auto& key : c.parked->keys)
    if (!data_.contains(key)) return;
  FrameWriter out;
  out.u8(static_cast<std::uint8_t>(Status::ok));
  if (c.parked->command == Command::get) out.str(data_.at(c.parked->keys.front()));
  c.out += out.take();
  c.parked.reset();
}

void ServerState::expire_parked(Session& c, Clock::time_point now) {
  if (!c.parked || c.parked->deadline > now) return;
  FrameWriter out;
  out.u8(static_cast<std::uint8_t>(Status::timeout));
  std::vector<std::string> missing;
  for (const auto& key : c.parked->keys)
    if (!data_.contains(key)) missing.push_back(key);
  out.i64(static_cast<std::int64_t>(missing.size()));
  for (const auto& key : missing) out.str(key);
  c.out += out.take();
  c.parked.reset();
}

}  // namespace tessera::tcp
