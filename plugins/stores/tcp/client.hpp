#pragma once
// StoreClient: a connection pool to a tcp store server. Each request borrows an idle connection
// (or opens one), so a get blocked on one thread never delays a set from another.

#include <chrono>
#include <cstdint>
#include <mutex>
#include <string>
#include <vector>

#include "socket.hpp"

namespace tessera::tcp {

class StoreClient {
 public:
  // Does not connect yet. `retry_timeout` bounds how long a request keeps reconnecting after a
  // transient error (refused, reset, server restarting) before it gives up.
  StoreClient(std::string host, std::uint16_t port, std::string token,
              std::chrono::milliseconds retry_timeout);

  // Sends one request payload and returns the reply payload. `wait` is how long the server
  // may legitimately hold the reply (a get or wait timeout). An `idempotent` request is resent
  // after a lost connection; any other is resent only when it certainly did not reach the
  // server. Throws Error when the server refuses the token, ConnectionLost when it cannot be
  // reached before the retry timeout.
  [[nodiscard]] std::string request(const std::string& frame, std::chrono::milliseconds wait,
                                    bool idempotent);

  [[nodiscard]] std::string address() const;

 private:
  Socket open_connection(Clock::time_point deadline);
  Socket borrow(Clock::time_point deadline);
  void give_back(Socket socket);

  std::string host_;
  std::uint16_t port_;
  std::string token_;
  std::chrono::milliseconds retry_timeout_;
  std::mutex mutex_;
  std::vector<Socket> idle_;
};

}  // namespace tessera::tcp
