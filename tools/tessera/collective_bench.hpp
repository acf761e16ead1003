#pragma once
// The measurement behind `tessera bench collectives`, run on every rank of a world.
//
// Method (the same as tools/bench/mpi_collectives.c, so the two compare): for each size,
// `repetitions` back-to-back batches of k operations, each issued and waited for in turn, k
// chosen so that a batch takes about 20 ms; a repetition's time is batch time / k on rank 0.
// Rows give the median and the minimum; `bytes` follows nccl-tests (the whole buffer: the
// input of reduce_scatter, the output of all_gather), busbw the nccl-tests factors.

#include <cstdint>
#include <memory>
#include <ostream>
#include <string>
#include <string_view>
#include <vector>

#include "tessera/base/device_allocator.hpp"
#include "tessera/plugin/communicator.hpp"

namespace tessera::cli {

enum class Collective : std::uint8_t { all_reduce, reduce_scatter, all_gather, broadcast };

[[nodiscard]] Collective parse_collective(std::string_view name);
[[nodiscard]] std::string_view collective_name(Collective op) noexcept;

struct CollectiveBenchOptions {
  std::string transport;  // for the table's title
  std::vector<Collective> ops;
  std::vector<std::uint64_t> sizes;  // bytes
  int repetitions = 15;
  bool json = false;
};

struct CollectiveBenchRow {
  Collective op = Collective::all_reduce;
  std::uint64_t bytes = 0;
  double time_us_median = 0;
  double time_us_min = 0;
  double algbw_gbps = 0;
  double busbw_gbps = 0;
  bool ok = false;
};

// Collective over `world`: every rank must call it with the same options. Buffers come from
// `memory`, which must be memory `world` moves (the host's for every CPU transport, the GPU's
// for nccl). Rank 0 writes the table (or JSON lines) to `out`. Returns whether every result was
// correct on every rank.
bool run_collective_bench(Communicator& world, const std::shared_ptr<DeviceAllocator>& memory,
                          const CollectiveBenchOptions& options, std::ostream& out);

}  // namespace tessera::cli
