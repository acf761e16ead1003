#include "transport.hpp"

#include "communicator.hpp"
#include "tags.hpp"
#include "tessera/base/error.hpp"

namespace tessera::ucx {

namespace {
constexpr const char* kConnectCounter = "tessera.ucx/connects";
}  // namespace

UcxTransport::UcxTransport(const Options& options) {
  settings_.timeout = options.get_duration("timeout");
  settings_.small_bytes = options.get_size("small_size");
  settings_.segment_bytes = options.get_size("segment_size");
  const std::int64_t in_flight = options.get_int("segments_in_flight");
  TESSERA_CHECK(in_flight > 0, "[transport.ucx] segments_in_flight must be positive");
  settings_.segments_in_flight = static_cast<std::size_t>(in_flight);
  settings_.liveness_interval = options.get_duration("liveness_interval");
  settings_.stall_timeout = options.get_duration("stall_timeout");
  settings_.map_peers = options.get_bool("map_peers");
  settings_.mapped_chunk_bytes = options.get_size("mapped_chunk_size");
  settings_.tcp_segment_bytes = options.get_size("tcp_segment_size");
  TESSERA_CHECK(
      settings_.mapped_chunk_bytes >= 4096 && settings_.mapped_chunk_bytes % 64 == 0,
      "[transport.ucx] mapped_chunk_size must be at least 4KiB and a multiple of 64 bytes");
  TESSERA_CHECK(settings_.timeout.count() > 0, "[transport.ucx] timeout must be positive");
  TESSERA_CHECK(settings_.segment_bytes > 0, "[transport.ucx] segment_size must be positive");
  TESSERA_CHECK(settings_.stall_timeout.count() >= 0,
                "[transport.ucx] stall_timeout must not be negative");
  TESSERA_CHECK(settings_.liveness_interval.count() > 0,
                "[transport.ucx] liveness_interval must be positive");
}

// Ranks take tickets from a store counter, as in every transport: the k-th world connected
// through one store publishes under generation k, so a store can serve successive worlds.
std::unique_ptr<Communicator> UcxTransport::do_connect(std::shared_ptr<Store> store, int rank,
                                                       int size, Duration timeout) {
  TESSERA_CHECK(size > 0 && size <= kMaxRanks, "ucx: world size " + std::to_string(size) +
                                                   " is outside [1, " + std::to_string(kMaxRanks) +
                                                   "]");
  TESSERA_CHECK(rank >= 0 && rank < size, "ucx: rank " + std::to_string(rank) + " is outside [0, " +
                                              std::to_string(size) + ")");
  const Deadline deadline = deadline_after(timeout);
  const std::int64_t ticket = store->add(kConnectCounter, 1);
  const std::string prefix = "tessera.ucx/" + std::to_string((ticket - 1) / size) + "/peer/";

  auto engine = std::make_unique<Engine>(std::make_shared<UcxContext>(settings_.tcp_segment_bytes),
                                         rank, size, settings_);
  const PeerInfo self = this_process(engine->address());
  store->set(prefix + std::to_string(rank), encode(self));

  std::vector<std::string> keys;
  for (int r = 0; r < size; ++r) keys.push_back(prefix + std::to_string(r));
  try {
    store->wait(keys, timeout);
  } catch (const Timeout&) {
    std::string missing;
    for (int r = 0; r < size; ++r)
      if (!store->check(keys[static_cast<std::size_t>(r)]))
        missing += (missing.empty() ? "" : ", ") + std::to_string(r);
    throw Timeout("ucx: connect of rank " + std::to_string(rank) + " of " + std::to_string(size) +
                  " timed out after " + std::to_string(timeout.count()) +
                  " ms; rank(s) never arrived: " + missing);
  }
  std::vector<PeerInfo> peers;
  for (int r = 0; r < size; ++r) {
    peers.push_back(r == rank ? self
                              : decode(store->get(keys[static_cast<std::size_t>(r)], timeout), r));
  }
  engine->start(std::move(peers), deadline);
  return std::make_unique<UcxCommunicator>(std::move(engine));
}

}  // namespace tessera::ucx
