#pragma once
// tcp://HOST:PORT: the tcp store's URLs, read by the plugin itself
// (tessera/plugin/store_url_scheme.hpp). A tcp store's server holds one job, so a job's URL is
// the server's.

#include "tessera/plugin/store_url_scheme.hpp"

namespace tessera::tcp {

class TcpUrlScheme final : public StoreUrlScheme {
 public:
  static constexpr const char* kScheme = "tcp";

  [[nodiscard]] std::string forms() const override;
  [[nodiscard]] std::string canonical(const std::string& location) const override;
  [[nodiscard]] std::string for_job(const std::string& location,
                                    const std::string& job_id) const override;
  [[nodiscard]] std::map<std::string, std::string> options(
      const std::string& location) const override;
  // forget_job: the default; the launcher that serves the store ends it with the job instead.
};

}  // namespace tessera::tcp
