#include "tessera/sdk/plugin.hpp"

#include "transport.hpp"

namespace {

constexpr tessera_option_desc kOptions[] = {
    {"timeout", "duration", "300s",
     "deadline of connect, split and every operation (Work::wait's default); past it the "
     "communicator is aborted (ncclCommAbort) and the operation fails naming itself",
     nullptr, "1ms", nullptr},
    {"poll_interval", "duration", "1ms",
     "longest sleep between two looks at an unfinished operation (its CUDA event and "
     "ncclCommGetAsyncError); the first looks spin",
     nullptr, "1ms", "1s"},
};

// Ranks are processes (or threads) on any hosts, one GPU each; buffers live on that GPU.
constexpr tessera_plugin_capabilities kCapabilities = {
    TESSERA_SPANS_PROCESSES | TESSERA_SPANS_HOSTS, TESSERA_DEVICE_CUDA};

}  // namespace

TESSERA_PLUGIN(transport, "nccl", "1.0.0",
               "ranks on NVIDIA GPUs over NCCL, one GPU per rank, buffers in device memory",
               TESSERA_NO_ALIASES, kOptions, kCapabilities, tessera::nccl::NcclTransport)
