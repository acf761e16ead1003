#include "host_port.hpp"

#include <charconv>
#include <optional>

#include "tessera/base/error.hpp"

namespace tessera::stores {

std::string host_port(const std::string& item, const std::string& default_port,
                      const std::string& forms) {
  const auto bad = [&](const std::string& why) {
    return ConfigError("'" + item + "' " + why + "; " + forms);
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

std::vector<std::string> host_ports(const std::string& list, const std::string& default_port,
                                    const std::string& forms) {
  std::vector<std::string> out;
  std::size_t begin = 0;
  while (begin <= list.size()) {
    auto comma = list.find(',', begin);
    if (comma == std::string::npos) comma = list.size();
    out.push_back(host_port(list.substr(begin, comma - begin), default_port, forms));
    begin = comma + 1;
  }
  return out;
}

std::pair<std::string, std::string> split_host_port(const std::string& address) {
  const auto colon = address.rfind(':');
  auto host = address.substr(0, colon);
  if (host.size() > 2 && host.front() == '[') host = host.substr(1, host.size() - 2);
  return {host, address.substr(colon + 1)};
}

std::string join_with_commas(const std::vector<std::string>& items) {
  std::string out;
  for (const auto& item : items) out += (out.empty() ? "" : ",") + item;
  return out;
}

}  // namespace tessera::stores
