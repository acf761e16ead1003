#pragma once
// file:///ABSOLUTE/PATH: the file store's URLs, read by the plugin itself
// (tessera/plugin/store_url_scheme.hpp). Each job gets the subfolder PATH/JOB_ID, removed with
// everything in it when the job is over.

#include "tessera/plugin/store_url_scheme.hpp"

namespace tessera::file {

class FileUrlScheme final : public StoreUrlScheme {
 public:
  static constexpr const char* kScheme = "file";

  [[nodiscard]] std::string forms() const override;
  [[nodiscard]] std::string canonical(const std::string& location) const override;
  [[nodiscard]] std::string for_job(const std::string& location,
                                    const std::string& job_id) const override;
  [[nodiscard]] std::map<std::string, std::string> options(
      const std::string& location) const override;
  // Removes the job's folder: its lock and lease files as well as its keys.
  void forget_job(const std::string& location, Store& store) const override;
};

}  // namespace tessera::file
