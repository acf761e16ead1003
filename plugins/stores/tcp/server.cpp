#include "server.hpp"

#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <charconv>
#include <cstring>
#include <list>
#include <map>
#include <optional>
#include <vector>

#include "protocol.hpp"
#include "socket.hpp"
#include "tessera/error.hpp"

namespace tessera::tcp {

namespace {

constexpr std::size_t kReadChunk = 64 * 1024;

// A request that cannot be answered yet: a get or a wait on keys that do not exist.
struct Parked {
  Command command = Command::get;
  std::vector<std::string> keys;
  Clock::time_point deadline;
};

struct Connection {
  Socket socket;
  std::string in;
  std::string out;
  bool admitted = false;
  bool closing = false;  // close once `out` is flushed
  std::optional<Parked> parked;
};

std::string reply(Status status) {
  return FrameWriter().u8(static_cast<std::uint8_t>(status)).take();
}

}  // namespace

class StoreServer::Loop {
 public:
  Loop(Socket listener, std::string token)
      : listener_(std::move(listener)), token_(std::move(token)) {
    int fds[2];
    if (::pipe2(fds, O_CLOEXEC | O_NONBLOCK) != 0)
      throw Error(std::string("tcp store server: pipe failed: ") + std::strerror(errno));
    wake_read_ = Socket(fds[0]);
    wake_write_ = Socket(fds[1]);
  }

  void stop() noexcept {
    const char byte = 1;
    [[maybe_unused]] auto n = ::write(wake_write_.fd(), &byte, 1);
  }

  void run() noexcept {
    std::vector<pollfd> polled;
    for (;;) {
      polled.clear();
      polled.push_back({wake_read_.fd(), POLLIN, 0});
      polled.push_back({listener_.fd(), POLLIN, 0});
      for (auto& c : connections_) {
        const short events = static_cast<short>(POLLIN | (c.out.empty() ? 0 : POLLOUT));
        polled.push_back({c.socket.fd(), events, 0});
      }
      if (::poll(polled.data(), polled.size(), next_timeout_ms()) < 0 && errno != EINTR) return;
      if (polled[0].revents != 0) return;
      if (polled[1].revents & POLLIN) accept_all();
      auto it = connections_.begin();
      for (std::size_t i = 2; i < polled.size(); ++i, ++it) {
        if (polled[i].revents & (POLLIN | POLLHUP | POLLERR)) read_from(*it);
        if (it->socket.valid() && !it->out.empty() && (polled[i].revents & POLLOUT)) flush(*it);
      }
      expire_parked();
      connections_.remove_if([](const Connection& c) { return !c.socket.valid(); });
    }
  }

 private:
  int next_timeout_ms() const {
    std::optional<Clock::time_point> next;
    for (const auto& c : connections_)
      if (c.parked && (!next || c.parked->deadline < *next)) next = c.parked->deadline;
    return next ? poll_timeout_ms(*next) : -1;
  }

  void accept_all() {
    for (;;) {
      const int fd = ::accept4(listener_.fd(), nullptr, nullptr, SOCK_CLOEXEC | SOCK_NONBLOCK);
      if (fd < 0) return;  // EAGAIN, or a transient accept error: poll will report again
      connections_.emplace_back().socket = Socket(fd);
    }
  }

  void read_from(Connection& c) {
    char buffer[kReadChunk];
    for (;;) {
      const ssize_t got = ::recv(c.socket.fd(), buffer, sizeof buffer, 0);
      if (got > 0) {
        c.in.append(buffer, static_cast<std::size_t>(got));
        continue;
      }
      if (got < 0 && (errno == EINTR)) continue;
      if (got < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) break;
      c.socket.reset();  // EOF or error: the client went away
      return;
    }
    try {
      while (!c.closing && c.in.size() >= kFrameHeaderBytes) {
        const auto length = frame_length(c.in.data());
        if (length > kMaxFrameBytes) throw Error("oversized frame");
        if (c.in.size() < kFrameHeaderBytes + length) break;
        // A client sends its next request only after the reply: a request behind a parked one
        // is a protocol violation.
        if (c.parked) throw Error("request while another is pending");
        const std::string payload = c.in.substr(kFrameHeaderBytes, length);
        c.in.erase(0, kFrameHeaderBytes + length);
        handle(c, payload);
      }
    } catch (const Error&) {
      c.socket.reset();  // a malformed message: drop the connection, keep serving the others
      return;
    }
    flush(c);
  }

  void flush(Connection& c) {
    while (!c.out.empty()) {
      const ssize_t sent = ::send(c.socket.fd(), c.out.data(), c.out.size(), MSG_NOSIGNAL);
      if (sent < 0 && errno == EINTR) continue;
      if (sent < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) return;
      if (sent < 0) {
        c.socket.reset();
        return;
      }
      c.out.erase(0, static_cast<std::size_t>(sent));
    }
    if (c.closing) c.socket.reset();
  }

  void handle(Connection& c, const std::string& payload) {
    FrameReader in(payload);
    const auto command = static_cast<Command>(in.u8());
    if (!c.admitted) {
      const bool ok = command == Command::hello && in.i64() == kMagic &&
                      in.i64() == kProtocolVersion && in.str() == token_;
      if (!ok) {
        c.out += reply(Status::refused);
        c.closing = true;
        return;
      }
      c.admitted = true;
      c.out += reply(Status::ok);
      return;
    }
    switch (command) {
      case Command::set: {
        auto key = in.str();
        data_[key] = in.str();
        c.out += reply(Status::ok);
        wake_parked();
        return;
      }
      case Command::get: {
        auto key = in.str();
        const auto timeout = std::chrono::milliseconds(in.i64());
        park(c, Command::get, {std::move(key)}, timeout);
        return;
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
        if (matches) wake_parked();
        return;
      }
      case Command::wait: {
        const auto timeout = std::chrono::milliseconds(in.i64());
        const auto count = in.i64();
        if (count < 0 || static_cast<std::uint64_t>(count) > payload.size())
          throw Error("bad count");
        std::vector<std::string> keys;
        for (std::int64_t i = 0; i < count; ++i) keys.push_back(in.str());
        park(c, Command::wait, std::move(keys), timeout);
        return;
      }
      case Command::check:
      case Command::remove: {
        const auto key = in.str();
        const auto found = data_.find(key);
        const bool existed = found != data_.end();
        if (existed && command == Command::remove) data_.erase(found);
        c.out +=
            FrameWriter().u8(static_cast<std::uint8_t>(Status::ok)).i64(existed ? 1 : 0).take();
        return;
      }
      case Command::hello: break;
    }
    throw Error("unknown command");
  }

  void add(Connection& c, const std::string& key, std::int64_t delta) {
    std::int64_t value = 0;
    if (const auto found = data_.find(key); found != data_.end()) {
      const auto& text = found->second;
      const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), value);
      if (ec != std::errc() || end != text.data() + text.size()) {
        c.out += FrameWriter()
                     .u8(static_cast<std::uint8_t>(Status::bad_request))
                     .str("add: key '" + key + "' holds '" + text + "', not an integer")
                     .take();
        return;
      }
    }
    value += delta;
    data_[key] = std::to_string(value);
    c.out += FrameWriter().u8(static_cast<std::uint8_t>(Status::ok)).i64(value).take();
    wake_parked();
  }

  void park(Connection& c, Command command, std::vector<std::string> keys,
            std::chrono::milliseconds timeout) {
    timeout =
        std::clamp(timeout, std::chrono::milliseconds(0), std::chrono::milliseconds(kMaxWaitMs));
    c.parked = Parked{command, std::move(keys), Clock::now() + timeout};
    try_answer(c);
  }

  // Answers c's parked request if every key it waits for exists now.
  void try_answer(Connection& c) {
    for (const auto& key : c.parked->keys)
      if (!data_.contains(key)) return;
    FrameWriter out;
    out.u8(static_cast<std::uint8_t>(Status::ok));
    if (c.parked->command == Command::get) out.str(data_.at(c.parked->keys.front()));
    c.out += out.take();
    c.parked.reset();
  }

  void wake_parked() {
    for (auto& c : connections_) {
      if (!c.parked || !c.socket.valid()) continue;
      try_answer(c);
      if (!c.parked) flush(c);
    }
  }

  void expire_parked() {
    const auto now = Clock::now();
    for (auto& c : connections_) {
      if (!c.parked || !c.socket.valid() || c.parked->deadline > now) continue;
      FrameWriter out;
      out.u8(static_cast<std::uint8_t>(Status::timeout));
      std::vector<std::string> missing;
      for (const auto& key : c.parked->keys)
        if (!data_.contains(key)) missing.push_back(key);
      out.i64(static_cast<std::int64_t>(missing.size()));
      for (const auto& key : missing) out.str(key);
      c.out += out.take();
      c.parked.reset();
      flush(c);
    }
  }

  Socket listener_;
  Socket wake_read_;
  Socket wake_write_;
  std::string token_;
  std::list<Connection> connections_;  // a list: handlers hold references across insertions
  std::map<std::string, std::string> data_;
};

namespace {

Socket listen_on(const std::string& host, std::uint16_t port, std::uint16_t& bound_port) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_PASSIVE;
  addrinfo* found = nullptr;
  const auto port_text = std::to_string(port);
  if (const int rc = ::getaddrinfo(host.c_str(), port_text.c_str(), &hints, &found); rc != 0)
    throw Error("tcp store server: cannot resolve '" + host + "': " + ::gai_strerror(rc));
  std::string last_error = "no address";
  for (const addrinfo* ai = found; ai != nullptr; ai = ai->ai_next) {
    Socket s(
        ::socket(ai->ai_family, ai->ai_socktype | SOCK_CLOEXEC | SOCK_NONBLOCK, ai->ai_protocol));
    if (!s.valid()) continue;
    // Lets a restarted server take its port back while old connections sit in TIME_WAIT.
    const int one = 1;
    ::setsockopt(s.fd(), SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    if (::bind(s.fd(), ai->ai_addr, ai->ai_addrlen) != 0 || ::listen(s.fd(), SOMAXCONN) != 0) {
      last_error = std::strerror(errno);
      continue;
    }
    sockaddr_storage addr{};
    socklen_t len = sizeof addr;
    ::getsockname(s.fd(), reinterpret_cast<sockaddr*>(&addr), &len);
    bound_port =
        ntohs(addr.ss_family == AF_INET6 ? reinterpret_cast<sockaddr_in6*>(&addr)->sin6_port
                                         : reinterpret_cast<sockaddr_in*>(&addr)->sin_port);
    ::freeaddrinfo(found);
    return s;
  }
  ::freeaddrinfo(found);
  throw Error("tcp store server: cannot listen on " + host + ":" + port_text + ": " + last_error);
}

}  // namespace

StoreServer::StoreServer(const std::string& host, std::uint16_t port, std::string token)
    : host_(host) {
  auto listener = listen_on(host, port, port_);
  loop_ = std::make_unique<Loop>(std::move(listener), std::move(token));
  thread_ = std::thread([loop = loop_.get()] { loop->run(); });
}

StoreServer::~StoreServer() {
  loop_->stop();
  thread_.join();
}

}  // namespace tessera::tcp
