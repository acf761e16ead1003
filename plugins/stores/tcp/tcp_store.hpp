#pragma once
// TcpStore: the `tcp` store plugin's object. A client of a StoreServer, and optionally the
// server itself (option `serve`), so the launcher or rank 0 of an embedding host can run the
// job's store in-process while using it like every other rank.

#include <memory>
#include <optional>
#include <string>

#include "client.hpp"
#include "server.hpp"
#include "tessera/plugin/options.hpp"
#include "tessera/plugin/store.hpp"
#include "url_scheme.hpp"

namespace tessera::tcp {

// Every member is filled by resolve_settings; the schema in plugin.cpp holds the defaults.
struct TcpStoreSettings {
  std::string host;        // serve: address to bind; client: server to reach
  std::uint16_t port = 0;  // serve: 0 picks a free port
  std::string token;
  std::chrono::milliseconds timeout{};  // reconnect budget of every request
  bool serve = false;
  PendingLimits pending;  // serve: what connections without the token may cost
};

// Fills empty host/port/token from TESSERA_STORE_ADDR and TESSERA_STORE_TOKEN, defaults the
// server's host to 127.0.0.1, and checks that what is needed is there (ConfigError otherwise).
[[nodiscard]] TcpStoreSettings resolve_settings(const Options& options);

class TcpStore final : public Store {
 public:
  using UrlScheme = TcpUrlScheme;  // tcp://... (or HOST:PORT alone) names this store

  explicit TcpStore(const Options& options);
  explicit TcpStore(const TcpStoreSettings& settings);

  void set(const std::string& key, const std::string& value) override;
  void set(const std::string& key, const std::string& value, LeaseId lease) override;
  [[nodiscard]] std::string get(const std::string& key, Duration timeout) override;
  std::int64_t add(const std::string& key, std::int64_t delta) override;
  std::string compare_set(const std::string& key, const std::string& expected,
                          const std::string& desired) override;
  void wait(const std::vector<std::string>& keys, Duration timeout) override;
  std::optional<std::string> wait_for_change(const std::string& key,
                                             const std::optional<std::string>& known,
                                             Duration timeout) override;
  [[nodiscard]] std::vector<std::pair<std::string, std::string>> list(
      const std::string& prefix) override;
  [[nodiscard]] bool check(const std::string& key) override;
  bool remove(const std::string& key) override;
  [[nodiscard]] LeaseId grant_lease(Duration ttl) override;
  void keep_alive(LeaseId lease) override;
  void revoke_lease(LeaseId lease) override;
  [[nodiscard]] std::string address() const override;

 private:
  std::unique_ptr<StoreServer> server_;  // declared first: outlives the client
  std::unique_ptr<StoreClient> client_;
};

}  // namespace tessera::tcp
