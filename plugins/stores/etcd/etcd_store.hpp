#pragma once
// EtcdStore: the `etcd` store plugin's object, a client of an etcd v3 server (3.4 or later)
// through etcd's JSON gateway. Every key of the job lives under the option `prefix`; leases
// are etcd's own, so a process that dies loses its keys when etcd expires its lease.

#include <memory>
#include <string>
#include <vector>

#include "gateway_client.hpp"
#include "tessera/plugin/options.hpp"
#include "tessera/plugin/store.hpp"
#include "url_scheme.hpp"

namespace tessera::etcd {

// etcd counts a lease's ttl in whole seconds.
inline constexpr Duration kLeaseGranularity{1000};

// Every member is filled by resolve_settings; the schema in plugin.cpp holds the defaults.
struct EtcdStoreSettings {
  std::vector<Endpoint> endpoints;
  std::string prefix;  // prepended to every key
  Duration timeout{};  // how long one request keeps retrying
};

// Parses the options; ConfigError naming the option for what is wrong.
[[nodiscard]] EtcdStoreSettings resolve_settings(const Options& options);

class EtcdStore final : public Store {
 public:
  using UrlScheme = EtcdUrlScheme;  // etcd://... names this store

  explicit EtcdStore(const Options& options);
  explicit EtcdStore(EtcdStoreSettings settings);

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
  // ttl must be a whole number of seconds, and at least the server's minimum lease
  // (InvalidArgument otherwise, saying which).
  [[nodiscard]] LeaseId grant_lease(Duration ttl) override;
  void keep_alive(LeaseId lease) override;
  void revoke_lease(LeaseId lease) override;
  // The endpoints, comma-separated.
  [[nodiscard]] std::string address() const override;

 private:
  struct Entry {
    std::optional<std::string> value;  // nullopt: absent
    std::int64_t mod_revision = 0;     // 0: absent
    std::int64_t lease = 0;            // 0: unbound
    std::int64_t revision = 0;         // the store's revision the read saw
    bool answered = true;              // false: no answer before the read's deadline
  };
  Entry read(const std::string& full_key, const std::string& what,
             Deadline deadline = Deadline::max());
  // Applies `value` to full_key iff its mod_revision is still `seen`, keeping `lease`; false
  // when another writer came first.
  bool put_if_unchanged(const std::string& full_key, const std::string& value, const Entry& seen,
                        const std::string& what, Resend resend);
  // Blocks until full_key's value differs from `known`, or deadline (nullopt then).
  std::optional<std::optional<std::string>> watch_until_differs(
      const std::string& full_key, const std::optional<std::string>& known, Deadline deadline,
      const std::string& what);
  // call() that throws what an error answer means (fail) instead of returning it.
  GatewayReply checked(const std::string& path, const nlohmann::json& request,
                       const std::string& what, Resend resend);
  [[noreturn]] void fail(const GatewayReply& reply, const std::string& what) const;

  std::string prefix_;
  std::unique_ptr<GatewayClient> client_;
};

}  // namespace tessera::etcd
