#include "server.hpp"

#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <list>
#include <optional>
#include <random>
#include <vector>

#include "protocol.hpp"
#include "server_state.hpp"
#include "socket.hpp"
#include "tessera/base/error.hpp"

namespace tessera::tcp {

namespace {

constexpr std::size_t kReadChunk = 64 * 1024;
// After an accept error that a retry cannot fix at once (no descriptor, no memory), the
// listener rests this long instead of spinning on its ready state.
constexpr std::chrono::milliseconds kAcceptBackoff{100};

struct Connection {
  Socket socket;
  Session session;
  Clock::time_point hello_deadline;  // while not admitted
};

// A descriptor held in reserve: when accept() fails for want of descriptors, the reserve is
// closed to accept the waiting connection and close it, so that it leaves the backlog and
// the listener stops polling ready.
Socket open_reserve() noexcept {
  return Socket(::open("/dev/null", O_RDONLY | O_CLOEXEC));
}

// Where this server's lease ids start: random, below 2^62 so that counting up never overflows.
std::int64_t random_lease_base() {
  std::random_device random;
  return ((static_cast<std::int64_t>(random()) << 30) ^ random()) & 0x3fffffffffffffff;
}

}  // namespace

class StoreServer::Loop {
 public:
  Loop(Socket listener, std::string token, PendingLimits limits)
      : listener_(std::move(listener)),
        state_(std::move(token), random_lease_base()),
        limits_(limits),
        reserve_(open_reserve()) {
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
      const auto now = Clock::now();
      const bool listening = now >= listener_rests_until_;
      polled.clear();
      polled.push_back({wake_read_.fd(), POLLIN, 0});
      polled.push_back({listening ? listener_.fd() : -1, POLLIN, 0});
      for (auto& c : connections_) {
        const short events = static_cast<short>((c.session.closing ? 0 : POLLIN) |
                                                (c.session.out.empty() ? 0 : POLLOUT));
        polled.push_back({c.socket.fd(), events, 0});
      }
      if (::poll(polled.data(), polled.size(), next_timeout_ms()) < 0 && errno != EINTR) return;
      if (polled[0].revents != 0) return;
      if (polled[1].revents & POLLIN) accept_all();
      auto it = connections_.begin();
      for (std::size_t i = 2; i < polled.size(); ++i, ++it) {
        if (polled[i].revents & (POLLIN | POLLHUP | POLLERR)) read_from(*it);
        if (it->socket.valid() && !it->session.out.empty() && (polled[i].revents & POLLOUT))
          flush(*it);
      }
      if (state_.expire_leases(Clock::now())) wake_parked();
      expire(Clock::now());
      connections_.remove_if([](const Connection& c) { return !c.socket.valid(); });
    }
  }

 private:
  int next_timeout_ms() const {
    std::optional<Clock::time_point> next;
    const auto earlier = [&](Clock::time_point t) {
      if (!next || t < *next) next = t;
    };
    if (Clock::now() < listener_rests_until_) earlier(listener_rests_until_);
    if (const auto lease = state_.next_lease_deadline()) earlier(*lease);
    for (const auto& c : connections_) {
      if (!c.session.admitted) earlier(c.hello_deadline);
      if (c.session.parked) earlier(c.session.parked->deadline);
    }
    return next ? poll_timeout_ms(*next) : -1;
  }

  void accept_all() {
    for (;;) {
      const int fd = ::accept4(listener_.fd(), nullptr, nullptr, SOCK_CLOEXEC | SOCK_NONBLOCK);
      if (fd >= 0) {
        admit_pending(Socket(fd));
        continue;
      }
      if (errno == EAGAIN || errno == EWOULDBLOCK) return;
      if (errno == EINTR || errno == ECONNABORTED || errno == EPROTO) continue;
      if ((errno == EMFILE || errno == ENFILE) && reserve_.valid()) {
        reserve_.reset();
        Socket shed(::accept4(listener_.fd(), nullptr, nullptr, SOCK_CLOEXEC));
        const bool shed_one = shed.valid();
        const bool backlog_empty = !shed_one && (errno == EAGAIN || errno == EWOULDBLOCK);
        shed.reset();
        reserve_ = open_reserve();
        if (shed_one) continue;
        if (backlog_empty) return;
      }
      // Out of descriptors with no reserve, or out of memory: rest rather than spin.
      listener_rests_until_ = Clock::now() + kAcceptBackoff;
      return;
    }
  }

  // A new connection waits for its hello; the oldest waiting one makes room when too many do.
  // A flood of idle connections so evicts its own kind, never an admitted rank's connection.
  void admit_pending(Socket socket) {
    std::size_t pending = 0;
    auto oldest = connections_.end();
    for (auto it = connections_.begin(); it != connections_.end(); ++it) {
      if (it->session.admitted || !it->socket.valid()) continue;
      if (pending++ == 0) oldest = it;
    }
    if (pending >= std::max<std::size_t>(limits_.max_pending, 1)) oldest->socket.reset();
    auto& c = connections_.emplace_back();
    c.socket = std::move(socket);
    c.hello_deadline = Clock::now() + limits_.hello_timeout;
    // A rank sends its hello with its connect: reading it now admits the rank before a flood
    // accepted in the same batch could push it out.
    read_from(c);
  }

  void read_from(Connection& c) {
    char buffer[kReadChunk];
    bool changed = false;
    for (;;) {
      // A refused connection's further input is read and dropped, so it never piles up.
      const std::size_t budget =
          c.session.closing ? sizeof buffer
                            : std::min(sizeof buffer, ServerState::receive_budget(c.session));
      const ssize_t got = ::recv(c.socket.fd(), buffer, budget, 0);
      if (got > 0) {
        try {
          changed = state_.receive(c.session, {buffer, static_cast<std::size_t>(got)}) || changed;
        } catch (const ProtocolViolation&) {
          c.socket.reset();  // drop this connection, keep serving the others
          break;
        }
        continue;
      }
      if (got < 0 && errno == EINTR) continue;
      if (got < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) break;
      c.socket.reset();  // EOF or error: the client went away
      break;
    }
    if (c.socket.valid()) flush(c);
    if (changed) wake_parked();
  }

  void flush(Connection& c) {
    while (!c.session.out.empty()) {
      const ssize_t sent =
          ::send(c.socket.fd(), c.session.out.data(), c.session.out.size(), MSG_NOSIGNAL);
      if (sent < 0 && errno == EINTR) continue;
      if (sent < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) return;
      if (sent < 0) {
        c.socket.reset();
        return;
      }
      c.session.out.erase(0, static_cast<std::size_t>(sent));
    }
    if (c.session.closing) c.socket.reset();
  }

  void wake_parked() {
    for (auto& c : connections_) {
      if (!c.session.parked || !c.socket.valid()) continue;
      state_.answer_parked(c.session);
      if (!c.session.parked) flush(c);
    }
  }

  // Times out parked requests, and drops connections whose hello is overdue.
  void expire(Clock::time_point now) {
    for (auto& c : connections_) {
      if (!c.socket.valid()) continue;
      if (!c.session.admitted && c.hello_deadline <= now) {
        c.socket.reset();
        continue;
      }
      if (!c.session.parked) continue;
      state_.expire_parked(c.session, now);
      if (!c.session.parked) flush(c);
    }
  }

  Socket listener_;
  Socket wake_read_;
  Socket wake_write_;
  ServerState state_;
  PendingLimits limits_;
  Socket reserve_;
  Clock::time_point listener_rests_until_{};
  std::list<Connection> connections_;  // a list: handlers hold references across insertions
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

StoreServer::StoreServer(const std::string& host, std::uint16_t port, std::string token,
                         PendingLimits limits)
    : host_(host) {
  auto listener = listen_on(host, port, port_);
  loop_ = std::make_unique<Loop>(std::move(listener), std::move(token), limits);
  thread_ = std::thread([loop = loop_.get()] { loop->run(); });
}

StoreServer::~StoreServer() {
  loop_->stop();
  thread_.join();
}

}  // namespace tessera::tcp
