#pragma once
// A world of N ranks as threads of the test process, over a transport loaded by name.

#include <gtest/gtest.h>

#include <chrono>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <ostream>
#include <string>
#include <vector>

#include "tessera/plugin/communicator.hpp"
#include "tessera/plugin/transport.hpp"
#include "transports_under_test.hpp"

namespace tessera::conformance {

// Generous: only a broken transport ever waits this long, and then the test fails instead of
// hanging. Tests of the timeout itself pass their own short value.
inline constexpr Duration kTimeout = std::chrono::seconds(60);

// Options of a transport beyond its defaults, by name.
using TransportOptions = std::map<std::string, std::string>;

// The transport `name` from the plugin folder beside libtessera, with its `timeout` option set
// and `options` over its defaults. One registry per process, loaded on first use.
[[nodiscard]] std::shared_ptr<Transport> load_transport(const std::string& name,
                                                        Duration op_timeout,
                                                        const TransportOptions& options = {});

// Why `size` ranks of `transport` cannot run in this process, or nullopt when they can: a device
// transport (one whose buffers live on a GPU) needs a device per rank, and without one the
// tests skip with the transport's own words. Also nullopt for a transport that is not built.
[[nodiscard]] std::optional<std::string> unavailable(const std::string& transport, int size);

// Runs body(rank) on one thread per rank and joins them; an exception on a rank becomes a test
// failure naming the rank. Returns the exceptions by rank (null where the body returned).
std::vector<std::exception_ptr> run_on_ranks(int size, const std::function<void(int rank)>& body);

// Connects `size` ranks (one thread each, one store) and keeps their communicators. Over a
// device transport each communicator is seen through host buffers (staged.hpp).
class World {
 public:
  World(const std::string& transport, int size, Duration op_timeout = kTimeout,
        const TransportOptions& options = {});

  [[nodiscard]] int size() const noexcept { return static_cast<int>(communicators_.size()); }
  [[nodiscard]] Communicator& rank(int r) { return *communicators_[static_cast<std::size_t>(r)]; }
  [[nodiscard]] std::vector<std::shared_ptr<Communicator>>& communicators() {
    return communicators_;
  }

 private:
  std::shared_ptr<Transport> transport_;
  std::vector<std::shared_ptr<Communicator>> communicators_;
};

// Waits for every work, in order.
void wait_all(const std::vector<std::shared_ptr<Work>>& works);

// gtest parameter: a transport and a world size, under its defaults or one of its SmallChunks.
struct WorldParam {
  std::string transport;
  int size = 1;
  const SmallChunks* chunks = nullptr;  // null: the transport's defaults

  [[nodiscard]] TransportOptions options() const {
    return chunks ? chunks->options : TransportOptions{};
  }
};
inline void PrintTo(const WorldParam& param, std::ostream* os) {
  *os << param.transport << " x " << param.size << " ranks";
  if (param.chunks) *os << " (" << param.chunks->label << ")";
}
[[nodiscard]] std::vector<WorldParam> every_transport_and_size();
// Every transport's SmallChunks settings at each of its world sizes.
[[nodiscard]] std::vector<WorldParam> every_small_chunk_setting_and_size();
[[nodiscard]] std::string param_name(const ::testing::TestParamInfo<WorldParam>& info);

}  // namespace tessera::conformance
