#pragma once
// StoreServer: the tcp store's key-value server, one background thread multiplexing every
// connection with poll(). Blocking requests (get, wait, watch) park on their connection with a
// deadline and are answered when a write or a lease's end satisfies them or the deadline
// passes, so one slow waiter never delays another client. Leases are timed by this thread's
// clock and outlive the connections that granted them.

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <thread>

namespace tessera::tcp {

// What a connection that has not presented the token may cost the server. Beyond the frames'
// own bounds (protocol.hpp): at most `max_pending` such connections at once (a new one closes
// the oldest), each closed when its hello has not arrived within `hello_timeout`. Filled from
// the store's options (max_pending, hello_timeout), whose schema holds the defaults.
struct PendingLimits {
  std::size_t max_pending = 0;
  std::chrono::milliseconds hello_timeout{};
};

class StoreServer {
 public:
  // Binds host:port (port 0 picks a free one), listens and starts serving. Only connections
  // whose first message carries `token` are admitted. Throws tessera::Error when it cannot bind.
  StoreServer(const std::string& host, std::uint16_t port, std::string token, PendingLimits limits);
  // Stops the thread and closes every connection; clients then see the connection lost.
  ~StoreServer();
  StoreServer(const StoreServer&) = delete;
  StoreServer& operator=(const StoreServer&) = delete;

  [[nodiscard]] const std::string& host() const noexcept { return host_; }
  [[nodiscard]] std::uint16_t port() const noexcept { return port_; }

 private:
  class Loop;
  std::string host_;
  std::uint16_t port_ = 0;
  std::unique_ptr<Loop> loop_;
  std::thread thread_;
};

}  // namespace tessera::tcp
