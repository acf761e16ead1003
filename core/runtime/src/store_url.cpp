#include "tessera/runtime/store_url.hpp"

#include <boost/uuid/name_generator_sha1.hpp>
#include <boost/uuid/uuid.hpp>
#include <charconv>
#include <filesystem>
#include <optional>

#include "tessera/base/error.hpp"

namespace tessera {

namespace {

constexpr const char* kForms =
    "write HOST:PORT or tcp://HOST:PORT (tessera's tcp store), etcd://HOST:PORT[,HOST:PORT...] "
    "(an etcd v3 server), or file:///ABSOLUTE/PATH (a folder every host sees)";
constexpr const char* kDefaultEtcdRoot = "tessera/";
constexpr const char* kEtcdDefaultPort = "2379";

// "host:port" with a port in 1-65535 ("[v6]:port" for IPv6); `default_port` fills a missing
// one. Returns it with the port normalised.
std::string endpoint(const std::string& item, const std::string& default_port,
                     const std::string& fail_lead) {
  const auto bad = [&](const std::string& why) {
    return ConfigError(fail_lead + "'" + item + "' " + why + "; " + kForms);
  };
  std::string host;
  std::optional<std::string> port;  // none: no ':PORT' at all
  if (!item.empty() && item.front() == '[') {
    const auto close = item.find(']');
    if (close == std::string::npos || close == 1) throw bad("is not [IPV6]:PORT");
    host = item.substr(0, close + 1);
    if (close + 1 < item.size()) {
      if (item[close + 1] != ':') throw bad("is not [IPV6]:PORT");
      port = item.substr(close + 2);
    }
  } else {
    const auto colon = item.rfind(':');
    host = item.substr(0, colon);
    if (colon != std::string::npos) port = item.substr(colon + 1);
    if (host.find(':') != std::string::npos) throw bad("is an IPv6 address without [ ]");
  }
  if (host.empty()) throw bad("has no host");
  if (!port) port = default_port;
  int number = 0;
  const auto [end, ec] = std::from_chars(port->data(), port->data() + port->size(), number);
  if (port->empty() || ec != std::errc() || end != port->data() + port->size() || number < 1 ||
      number > 65535)
    throw bad("has no port 1-65535");
  return host + ":" + std::to_string(number);
}

std::string join(const std::vector<std::string>& items) {
  std::string out;
  for (const auto& item : items) out += (out.empty() ? "" : ",") + item;
  return out;
}

}  // namespace

StoreUrl parse_store_url(const std::string& text, const std::string& what) {
  const std::string lead = what + " " + text + ": ";
  StoreUrl url;
  const auto separator = text.find("://");
  const std::string rest = separator == std::string::npos ? text : text.substr(separator + 3);
  url.scheme = separator == std::string::npos ? "tcp" : text.substr(0, separator);
  if (text.empty()) throw ConfigError(what + ": empty; " + kForms);
  if (url.scheme == "tcp") {
    if (rest.find('/') != std::string::npos)
      throw ConfigError(lead + "a tcp store URL has no path; " + kForms);
    url.endpoints.push_back(endpoint(rest, "", lead));
  } else if (url.scheme == "etcd") {
    const auto slash = rest.find('/');
    const auto hosts = rest.substr(0, slash);
    std::size_t begin = 0;
    while (begin <= hosts.size()) {
      auto comma = hosts.find(',', begin);
      if (comma == std::string::npos) comma = hosts.size();
      url.endpoints.push_back(endpoint(hosts.substr(begin, comma - begin), kEtcdDefaultPort, lead));
      begin = comma + 1;
    }
    if (slash != std::string::npos) {
      url.path = rest.substr(slash + 1);
      if (!url.path.empty() && url.path.back() != '/') url.path += '/';
    }
  } else if (url.scheme == "file") {
    if (rest.empty() || rest.front() != '/')
      throw ConfigError(lead +
                        "a file store URL takes an absolute path, after three slashes "
                        "(file:///shared/rendezvous); a relative path would name another folder "
                        "in every process that starts elsewhere");
    url.path = std::filesystem::path(rest).lexically_normal().string();
    if (url.path.size() > 1 && url.path.back() == '/') url.path.pop_back();
  } else if (url.scheme == "etcds" || url.scheme == "https" || url.scheme == "etcd+https") {
    throw ConfigError(
        lead +
        "the etcd store speaks neither TLS nor etcd's authentication; serve "
        "etcd's client URL over http on a trusted network and write etcd://HOST:PORT");
  } else {
    throw ConfigError(lead + "unknown scheme '" + url.scheme + "'; " + kForms);
  }
  return url;
}

std::string StoreUrl::text() const {
  if (scheme == "file") return "file://" + path;
  if (scheme == "etcd") return "etcd://" + join(endpoints) + (path.empty() ? "" : "/" + path);
  return scheme + "://" + join(endpoints);
}

StoreUrl StoreUrl::for_job(const std::string& job_id) const {
  check_job_id(job_id, "the job id");
  StoreUrl job = *this;
  if (scheme == "etcd") job.path = (path.empty() ? kDefaultEtcdRoot : path) + job_id + "/";
  if (scheme == "file") job.path = (std::filesystem::path(path) / job_id).string();
  return job;
}

std::map<std::string, std::string> StoreUrl::plugin_options() const {
  if (scheme == "etcd") return {{"endpoints", join(endpoints)}, {"prefix", path}};
  if (scheme == "file") return {{"path", path}};
  const auto& address = endpoints.at(0);
  const auto colon = address.rfind(':');
  auto host = address.substr(0, colon);
  if (host.size() > 2 && host.front() == '[') host = host.substr(1, host.size() - 2);
  return {{"host", host}, {"port", address.substr(colon + 1)}};
}

std::string job_id_from_token(const std::string& token) {
  // A fixed namespace: the ids are tessera's own, distinct from any other v5 UUIDs of tokens.
  constexpr boost::uuids::uuid kNamespace = {{0x6b, 0x1f, 0x3a, 0x52, 0x0c, 0x7e, 0x4d, 0x9a, 0x8e,
                                              0x21, 0x5b, 0x64, 0xf0, 0x13, 0xa7, 0xc9}};
  const auto uuid = boost::uuids::name_generator_sha1(kNamespace)(token);
  static constexpr char kHex[] = "0123456789abcdef";
  std::string id;
  for (std::size_t i = 0; i < 8; ++i) {
    id.push_back(kHex[uuid.data[i] >> 4]);
    id.push_back(kHex[uuid.data[i] & 15]);
  }
  return id;
}

void check_job_id(const std::string& id, const std::string& what) {
  const bool valid =
      !id.empty() && id.size() <= 64 && id != "." && id != ".." &&
      id.find_first_not_of("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789._-") ==
          std::string::npos;
  if (!valid)
    throw ConfigError(what + " '" + id +
                      "' must be 1-64 letters, digits, '.', '_' or '-': it names the job's keys "
                      "in etcd and its folder in a file store");
}

}  // namespace tessera
