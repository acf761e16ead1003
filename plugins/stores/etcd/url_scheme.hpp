#pragma once
// etcd://HOST:PORT[,HOST:PORT...][/PREFIX]: the etcd store's URLs, read by the plugin itself
// (tessera/plugin/store_url_scheme.hpp). Each job's keys live under PREFIX/JOB_ID/.

#include "tessera/plugin/store_url_scheme.hpp"

namespace tessera::etcd {

class EtcdUrlScheme final : public StoreUrlScheme {
 public:
  static constexpr const char* kScheme = "etcd";

  [[nodiscard]] std::string forms() const override;
  [[nodiscard]] std::string canonical(const std::string& location) const override;
  [[nodiscard]] std::string for_job(const std::string& location,
                                    const std::string& job_id) const override;
  [[nodiscard]] std::map<std::string, std::string> options(
      const std::string& location) const override;
  // forget_job: every key under the job's prefix, as the default does.
};

}  // namespace tessera::etcd
