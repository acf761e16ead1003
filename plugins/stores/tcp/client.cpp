#include "client.hpp"

#include <poll.h>

#include <algorithm>
#include <thread>

#include "protocol.hpp"
#include "tessera/base/error.hpp"

namespace tessera::tcp {

namespace {

// Beyond the time the server may hold a request: the round trip itself.
constexpr std::chrono::milliseconds kReplyMargin{10'000};
constexpr std::chrono::milliseconds kFirstBackoff{10};
constexpr std::chrono::milliseconds kMaxBackoff{500};
constexpr std::size_t kMaxIdle = 8;

}  // namespace

StoreClient::StoreClient(std::string host, std::uint16_t port, std::string token,
                         std::chrono::milliseconds retry_timeout)
    : host_(std::move(host)),
      port_(port),
      token_(std::move(token)),
      retry_timeout_(retry_timeout) {}

std::string StoreClient::address() const {
  return (host_.find(':') == std::string::npos ? host_ : "[" + host_ + "]") + ":" +
         std::to_string(port_);
}

Socket StoreClient::open_connection(Clock::time_point deadline) {
  Socket s = connect_tcp(host_, port_, deadline);
  const auto hello = FrameWriter()
                         .u8(static_cast<std::uint8_t>(Command::hello))
                         .i64(kMagic)
                         .i64(kProtocolVersion)
                         .str(token_)
                         .take();
  send_all(s.fd(), hello, deadline);
  std::string answer;
  try {
    answer = recv_frame(s.fd(), std::max(deadline, Clock::now() + kReplyMargin));
  } catch (const Timeout&) {
    throw ConnectionLost("tcp store at " + address() + ": no answer to the handshake");
  }
  if (!answer.empty() && static_cast<Status>(answer[0]) == Status::ok) return s;
  // A server of protocol 2 or later says its version with the refusal; one of protocol 1 never
  // tells, and refuses this client's hello as it would a wrong token.
  if (answer.size() == 1 + 8) {
    FrameReader in(answer);
    in.u8();
    if (const auto version = in.i64(); version != kProtocolVersion)
      throw Error("tcp store at " + address() + " speaks protocol version " +
                  std::to_string(version) + ", this process version " +
                  std::to_string(kProtocolVersion) +
                  ": run the same tessera release in every process of the job");
  }
  throw Error("tcp store refused the token: the server at " + address() +
              " expects the job's token, and this process's (option `token` or "
              "TESSERA_STORE_TOKEN) differs; or the server is a tessera release older than "
              "this process's");
}

Socket StoreClient::borrow(Clock::time_point deadline) {
  {
    std::lock_guard lock(mutex_);
    while (!idle_.empty()) {
      Socket s = std::move(idle_.back());
      idle_.pop_back();
      // An idle connection has nothing to read unless the server closed it (restart, stop).
      pollfd p{s.fd(), POLLIN | POLLRDHUP, 0};
      if (::poll(&p, 1, 0) == 0) return s;
    }
  }
  return open_connection(deadline);
}

void StoreClient::give_back(Socket socket) {
  std::lock_guard lock(mutex_);
  if (idle_.size() < kMaxIdle) idle_.push_back(std::move(socket));
}

std::string StoreClient::request(const std::string& frame, std::chrono::milliseconds wait,
                                 bool idempotent) {
  const auto retry_deadline = Clock::now() + retry_timeout_;
  auto backoff = kFirstBackoff;
  for (;;) {
    bool sent = false;
    try {
      Socket s = borrow(retry_deadline);
      send_all(s.fd(), frame, retry_deadline);
      sent = true;
      std::string answer;
      try {
        answer = recv_frame(s.fd(), Clock::now() + wait + kReplyMargin);
      } catch (const Timeout&) {
        throw ConnectionLost("tcp store at " + address() + ": no reply within " +
                             std::to_string((wait + kReplyMargin).count()) + " ms");
      }
      give_back(std::move(s));
      return answer;
    } catch (const ConnectionLost& e) {
      // A request that reached the server may have been applied; repeating a non-idempotent
      // one (add, remove) could apply it twice, so its outcome is reported as unknown.
      if (sent && !idempotent)
        throw Error(std::string(e.what()) + "; the request may or may not have been applied");
      if (Clock::now() + backoff >= retry_deadline)
        throw ConnectionLost(std::string(e.what()) + " (gave up after " +
                             std::to_string(retry_timeout_.count()) + " ms of retries)");
    }
    std::this_thread::sleep_for(backoff);
    backoff = std::min(backoff * 2, kMaxBackoff);
  }
}

}  // namespace tessera::tcp
