#include "peer_info.hpp"

#include <unistd.h>

#include <fstream>
#include <iterator>

#include "tessera/base/error.hpp"

namespace tessera::ucx {

namespace {

std::string read_first_line(const std::string& path) {
  std::ifstream in(path);
  std::string line;
  std::getline(in, line);
  return line;
}

std::string host_identity() {
  char link[256] = {};
  const ssize_t n = ::readlink("/proc/self/ns/pid", link, sizeof link - 1);
  return read_first_line("/proc/sys/kernel/random/boot_id") + "/" +
         std::string(link, n > 0 ? static_cast<std::size_t>(n) : 0);
}

}  // namespace

PeerInfo this_process(std::string address) {
  return {std::move(address), host_identity(), static_cast<std::int64_t>(::getpid())};
}

std::string encode(const PeerInfo& info) {
  return std::to_string(info.pid) + "\n" + info.host + "\n" + info.address;
}

PeerInfo decode(const std::string& text, int rank) {
  const auto first = text.find('\n');
  const auto second = first == std::string::npos ? first : text.find('\n', first + 1);
  if (second == std::string::npos) {
    throw TransportError("ucx: the store holds a malformed address for rank " +
                             std::to_string(rank) + " (is the store shared with another job?)",
                         rank, "connect");
  }
  PeerInfo info;
  info.pid = std::stoll(text.substr(0, first));
  info.host = text.substr(first + 1, second - first - 1);
  info.address = text.substr(second + 1);
  return info;
}

bool process_alive(const PeerInfo& peer, const PeerInfo& self) {
  if (peer.host != self.host || peer.pid == self.pid) return true;
  const std::string stat = read_first_line("/proc/" + std::to_string(peer.pid) + "/stat");
  if (stat.empty()) return false;
  // The state letter follows the parenthesised command name, which may itself hold spaces.
  const auto close = stat.rfind(')');
  if (close == std::string::npos || close + 2 >= stat.size()) return true;
  const char state = stat[close + 2];
  return state != 'Z' && state != 'X';
}

}  // namespace tessera::ucx
