#include "transport.hpp"

#include "communicator.hpp"
#include "tessera/base/error.hpp"

namespace tessera::shm {

Settings Settings::from(const Options& options) {
  Settings s;
  s.timeout = options.get_duration("timeout");
  s.chunk_size = options.get_size("chunk_size");
  s.small_size = options.get_size("small_size");
  s.p2p_chunk_size = options.get_size("p2p_chunk_size");
  s.spin_count = options.get_int("spin_count");
  s.poll_interval = options.get_duration("poll_interval");
  s.stall_timeout = options.get_duration("stall_timeout");
  auto require = [&](bool ok, const std::string& message) {
    if (!ok) throw ConfigError("[" + options.section() + "] " + message);
  };
  require(s.timeout.count() > 0, "timeout must be positive");
  require(s.chunk_size >= 64 && s.chunk_size <= (std::size_t{1} << 30),
          "chunk_size must be between 64 B and 1 GiB");
  require(s.p2p_chunk_size >= 64 && s.p2p_chunk_size <= (std::size_t{1} << 30),
          "p2p_chunk_size must be between 64 B and 1 GiB");
  require(s.spin_count >= 0, "spin_count must not be negative");
  require(s.poll_interval.count() > 0 && s.poll_interval <= std::chrono::seconds(1),
          "poll_interval must be between 1 ms and 1 s (it bounds dead-peer detection)");
  require(s.stall_timeout.count() >= 0, "stall_timeout must not be negative");
  return s;
}

ShmTransport::ShmTransport(const Options& options) : settings_(Settings::from(options)) {}

std::unique_ptr<Communicator> ShmTransport::do_connect(std::shared_ptr<Store> store, int rank,
                                                       int size, Duration timeout) {
  return connect_group(std::move(store), rank, size, settings_, timeout);
}

}  // namespace tessera::shm
