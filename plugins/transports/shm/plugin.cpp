#include "tessera/sdk/plugin.hpp"

#include "transport.hpp"

namespace {

constexpr tessera_option_desc kOptions[] = {
    {"timeout", "duration", "300s",
     "deadline of every operation while it waits for peers; also Work::wait's default", nullptr,
     "1ms", nullptr},
    {"chunk_size", "size", "128KiB",
     "bytes per rank per pipeline round; each rank's staging buffer holds size x chunk_size",
     nullptr, "64B", "1GiB"},
    {"small_size", "size", "32KiB",
     "all_reduce up to this many bytes uses the one-synchronisation latency algorithm", nullptr,
     "0", "1GiB"},
    {"p2p_chunk_size", "size", "256KiB", "payload of each of the two slots of a send/recv channel",
     nullptr, "64B", "1GiB"},
    {"spin_count", "int", "20000", "polls of a flag before a waiting rank sleeps on the futex",
     nullptr, "0", "1000000000"},
    {"poll_interval", "duration", "100ms",
     "longest futex sleep between checks for dead peers, abort and the deadline", nullptr, "1ms",
     "1s"},
    {"stall_timeout", "duration", "30s",
     "a peer waited for whose process makes no progress at all (stopped, frozen) for this long "
     "fails the job, naming it, the operation and its number (0: only timeout applies)",
     nullptr, "0", "24h"},
};
constexpr const char* kAliases[] = {"shared_memory", nullptr};

// Processes, but shared memory is one host's.
constexpr tessera_plugin_capabilities kCapabilities = {TESSERA_SPANS_PROCESSES, TESSERA_DEVICE_CPU};

}  // namespace

TESSERA_PLUGIN(transport, "shm", "1.0.0", "processes on one host over POSIX shared memory",
               kAliases, kOptions, kCapabilities, tessera::shm::ShmTransport)
