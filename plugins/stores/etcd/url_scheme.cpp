#include "url_scheme.hpp"

#include <vector>

#include "host_port.hpp"

namespace tessera::etcd {

namespace {

constexpr const char* kDefaultPort = "2379";
// Where jobs live when the URL names no prefix.
constexpr const char* kDefaultRoot = "tessera/";

struct Location {
  std::vector<std::string> endpoints;
  std::string prefix;  // "" or ending in '/'
};

Location read(const std::string& location, const std::string& forms) {
  const auto slash = location.find('/');
  Location out;
  out.endpoints = stores::host_ports(location.substr(0, slash), kDefaultPort, forms);
  if (slash != std::string::npos) {
    out.prefix = location.substr(slash + 1);
    if (!out.prefix.empty() && out.prefix.back() != '/') out.prefix += '/';
  }
  return out;
}

std::string text(const Location& location) {
  return stores::join_with_commas(location.endpoints) +
         (location.prefix.empty() ? "" : "/" + location.prefix);
}

}  // namespace

std::string EtcdUrlScheme::forms() const {
  return "etcd://HOST:PORT[,HOST:PORT...][/PREFIX] (an etcd v3 server, over http: the etcd "
         "store speaks neither TLS nor etcd's authentication)";
}

std::string EtcdUrlScheme::canonical(const std::string& location) const {
  return text(read(location, "write " + forms()));
}

std::string EtcdUrlScheme::for_job(const std::string& location, const std::string& job_id) const {
  auto job = read(location, "write " + forms());
  job.prefix = (job.prefix.empty() ? kDefaultRoot : job.prefix) + job_id + "/";
  return text(job);
}

std::map<std::string, std::string> EtcdUrlScheme::options(const std::string& location) const {
  const auto where = read(location, "write " + forms());
  return {{"endpoints", stores::join_with_commas(where.endpoints)}, {"prefix", where.prefix}};
}

}  // namespace tessera::etcd
