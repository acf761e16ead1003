#include "url_scheme.hpp"

#include <filesystem>

#include "tessera/base/error.hpp"

namespace tessera::file {

std::string FileUrlScheme::forms() const {
  return "file:///ABSOLUTE/PATH (a folder every host sees)";
}

std::string FileUrlScheme::canonical(const std::string& location) const {
  if (location.empty() || location.front() != '/')
    throw ConfigError(
        "a file store URL takes an absolute path, after three slashes (file:///shared/rendezvous); "
        "a relative path would name another folder in every process that starts elsewhere");
  auto path = std::filesystem::path(location).lexically_normal().string();
  if (path.size() > 1 && path.back() == '/') path.pop_back();
  return path;
}

std::string FileUrlScheme::for_job(const std::string& location, const std::string& job_id) const {
  return (std::filesystem::path(canonical(location)) / job_id).string();
}

std::map<std::string, std::string> FileUrlScheme::options(const std::string& location) const {
  return {{"path", canonical(location)}};
}

void FileUrlScheme::forget_job(const std::string& location, Store& /*store*/) const {
  std::filesystem::remove_all(canonical(location));
}

}  // namespace tessera::file
