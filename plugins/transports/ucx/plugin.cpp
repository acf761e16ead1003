#include "tessera/sdk/plugin.hpp"

#include "transport.hpp"

namespace {

constexpr tessera_option_desc kOptions[] = {
    {"timeout", "duration", "300s",
     "deadline of every operation while it waits for peers; also Work::wait's default", nullptr,
     "1ms", nullptr},
    {"small_size", "size", "64KiB",
     "all_reduce and broadcast up to this many bytes use the one-round algorithms", nullptr, "0",
     "1GiB"},
    {"segment_size", "size", "512KiB",
     "pipeline unit of the large algorithms: owners reduce and forward one segment at a time",
     nullptr, "1KiB", "1GiB"},
    {"segments_in_flight", "int", "2",
     "contribution segments each owner has receives posted for, per peer (its scratch ring)",
     nullptr, "1", "1024"},
    {"liveness_interval", "duration", "250ms",
     "how often a waiting rank checks that its peer processes on this host still run", nullptr,
     "1ms", nullptr},
    {"stall_timeout", "duration", "30s",
     "a peer waited for from which no heartbeat arrived for this long (process stopped or "
     "frozen, network down) fails the job, naming it, the operation and its number (0: only "
     "timeout applies)",
     nullptr, "0", "24h"},
    {"map_peers", "bool", "true",
     "where UCX can map every peer's memory (all ranks on one host, UCX_TLS with posix or sysv), "
     "run large all_reduce, reduce_scatter, all_gather and broadcast through mapped staging "
     "buffers "
     "instead of messages",
     nullptr, nullptr, nullptr},
    {"tcp_segment_size", "size", "256KiB",
     "segment size of UCX's tcp transport (UCX_TCP_TX_SEG_SIZE and UCX_TCP_RX_SEG_SIZE, which "
     "win when set); 0 keeps UCX's own 8KiB",
     nullptr, "0", "1GiB"},
    {"mapped_chunk_size", "size", "128KiB",
     "per rank and round of the mapped algorithms: each rank's staging buffer holds ranks x this",
     nullptr, "4KiB", "1GiB"},
};

constexpr tessera_plugin_capabilities kCapabilities = {
    TESSERA_SPANS_PROCESSES | TESSERA_SPANS_HOSTS, TESSERA_DEVICE_CPU};

}  // namespace

TESSERA_PLUGIN(transport, "ucx", "1.0.0",
               "processes on any hosts over UCX UCP (TCP, shared memory, RDMA; see UCX_TLS)",
               TESSERA_NO_ALIASES, kOptions, kCapabilities, tessera::ucx::UcxTransport)
