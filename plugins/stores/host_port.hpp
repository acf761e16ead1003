#pragma once
// "HOST:PORT" as the URLs of the tcp and etcd stores write a server's address: the one reader of
// it, shared by both plugins' URL schemes (tessera/plugin/store_url_scheme.hpp).

#include <string>
#include <utility>
#include <vector>

namespace tessera::stores {

// `item` as "host:port" with a port in 1-65535 ("[v6addr]:port" for IPv6), the port normalised;
// `default_port` ("" for none) stands in for a missing ":PORT". Throws ConfigError
// "'ITEM' has no port 1-65535; " + `forms` (also: has no host, is an IPv6 address without [ ]).
[[nodiscard]] std::string host_port(const std::string& item, const std::string& default_port,
                                    const std::string& forms);

// A comma-separated list of host_port items, each checked as above.
[[nodiscard]] std::vector<std::string> host_ports(const std::string& list,
                                                  const std::string& default_port,
                                                  const std::string& forms);

// The host (without IPv6 brackets) and port of a canonical "host:port".
[[nodiscard]] std::pair<std::string, std::string> split_host_port(const std::string& address);

[[nodiscard]] std::string join_with_commas(const std::vector<std::string>& items);

}  // namespace tessera::stores
