#include "url_scheme.hpp"

#include "host_port.hpp"
#include "tessera/base/error.hpp"

namespace tessera::tcp {

std::string TcpUrlScheme::forms() const {
  return "HOST:PORT or tcp://HOST:PORT (tessera's tcp store)";
}

std::string TcpUrlScheme::canonical(const std::string& location) const {
  if (location.find('/') != std::string::npos)
    throw ConfigError("a tcp store URL has no path; write " + forms());
  return stores::host_port(location, "", "write " + forms());
}

std::string TcpUrlScheme::for_job(const std::string& location,
                                  const std::string& /*job_id*/) const {
  return canonical(location);
}

std::map<std::string, std::string> TcpUrlScheme::options(const std::string& location) const {
  const auto [host, port] = stores::split_host_port(canonical(location));
  return {{"host", host}, {"port", port}};
}

}  // namespace tessera::tcp
