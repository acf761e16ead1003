#include "collective_bench.hpp"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <nlohmann/json.hpp>
#include <vector>

#include "tessera/base/error.hpp"

namespace tessera::cli {

namespace {

using Clock = std::chrono::steady_clock;

// Small integers, so that float sums are exact and the check can be exact too.
float pattern(std::size_t index, int rank) {
  return static_cast<float>((index * 7 + static_cast<std::size_t>(rank) * 3) % 17);
}

// The operation's buffers, in the memory the communicator moves (a GPU's for nccl), and host
// copies to fill and check them.
class Buffers {
 public:
  Buffers(std::shared_ptr<DeviceAllocator> memory, std::size_t count)
      : memory_(std::move(memory)), count_(count), input_(count), output_(count) {
    const std::size_t bytes = count * sizeof(float);
    in_ = memory_->allocate(bytes);
    out_ = memory_->allocate(bytes);
  }
  ~Buffers() {
    memory_->deallocate(in_, count_ * sizeof(float));
    memory_->deallocate(out_, count_ * sizeof(float));
  }
  Buffers(const Buffers&) = delete;
  Buffers& operator=(const Buffers&) = delete;

  [[nodiscard]] std::size_t count() const noexcept { return count_; }
  [[nodiscard]] BufferView in() const { return {in_, count_, DType::f32, memory_->device()}; }
  [[nodiscard]] BufferView out() const { return {out_, count_, DType::f32, memory_->device()}; }
  // Host copies: fill them, then to_device(); after an operation, to_host() reads them back.
  std::vector<float>& input() { return input_; }
  std::vector<float>& output() { return output_; }
  void to_device() {
    memory_->copy(in(), view_of(std::span<float>(input_)));
    memory_->copy(out(), view_of(std::span<float>(output_)));
  }
  void to_host() {
    memory_->copy(view_of(std::span<float>(input_)), in());
    memory_->copy(view_of(std::span<float>(output_)), out());
  }

 private:
  std::shared_ptr<DeviceAllocator> memory_;
  std::size_t count_;  // the whole buffer, in elements (see header)
  std::vector<float> input_;
  std::vector<float> output_;
  void* in_ = nullptr;
  void* out_ = nullptr;
};

void run_once(Communicator& world, Collective op, const Buffers& b) {
  const auto n = static_cast<std::size_t>(world.size());
  const BufferView in = b.in();
  const BufferView out = b.out();
  switch (op) {
    case Collective::all_reduce: world.all_reduce(in, ReduceOp::sum)->wait(); break;
    case Collective::reduce_scatter:
      world.reduce_scatter(in, out.slice(0, b.count() / n), ReduceOp::sum)->wait();
      break;
    case Collective::all_gather: world.all_gather(in.slice(0, b.count() / n), out)->wait(); break;
    case Collective::broadcast: world.broadcast(in, 0)->wait(); break;
  }
}

// A small collective on host values, through the communicator's memory.
template <class T>
T reduced(Communicator& world, DeviceAllocator& memory, T mine, ReduceOp op) {
  const BufferView host = view_of(std::span<T>(&mine, 1));
  if (memory.device() == Device::cpu()) {
    world.all_reduce(host, op)->wait();
    return mine;
  }
  void* word = memory.allocate(sizeof(T));
  const BufferView there{word, 1, host.dtype, memory.device()};
  memory.copy(there, host);
  world.all_reduce(there, op)->wait();
  memory.copy(host, there);
  memory.deallocate(word, sizeof(T));
  return mine;
}

bool all_ranks_agree(Communicator& world, DeviceAllocator& memory, bool mine) {
  return reduced<std::int32_t>(world, memory, mine ? 1 : 0, ReduceOp::min) == 1;
}

bool verify(Communicator& world, DeviceAllocator& memory, Collective op, Buffers& b) {
  const int rank = world.rank();
  const int size = world.size();
  const std::size_t count = b.count();
  const std::size_t block = count / static_cast<std::size_t>(size);
  auto& input = b.input();
  auto& output = b.output();
  for (std::size_t i = 0; i < count; ++i) input[i] = pattern(i, rank);
  std::fill(output.begin(), output.end(), -1.0F);
  b.to_device();
  run_once(world, op, b);
  b.to_host();
  bool ok = true;
  auto sum_over_ranks = [size](std::size_t i) {
    float s = 0;
    for (int r = 0; r < size; ++r) s += pattern(i, r);
    return s;
  };
  switch (op) {
    case Collective::all_reduce:
      for (std::size_t i = 0; i < count && ok; ++i) ok = input[i] == sum_over_ranks(i);
      break;
    case Collective::reduce_scatter:
      for (std::size_t i = 0; i < block && ok; ++i) {
        ok = output[i] == sum_over_ranks(static_cast<std::size_t>(rank) * block + i);
      }
      break;
    case Collective::all_gather:
      for (std::size_t i = 0; i < count && ok; ++i) {
        ok = output[i] == pattern(i % block, static_cast<int>(i / block));
      }
      break;
    case Collective::broadcast:
      for (std::size_t i = 0; i < count && ok; ++i) ok = input[i] == pattern(i, 0);
      break;
  }
  return all_ranks_agree(world, memory, ok);
}

double bus_factor(Collective op, int n) {
  switch (op) {
    case Collective::all_reduce: return 2.0 * (n - 1) / n;
    case Collective::broadcast: return 1.0;
    case Collective::reduce_scatter:
    case Collective::all_gather: return static_cast<double>(n - 1) / n;
  }
  return 1.0;
}

CollectiveBenchRow measure(Communicator& world, const std::shared_ptr<DeviceAllocator>& memory,
                           Collective op, std::uint64_t bytes, int repetitions) {
  const auto n = static_cast<std::size_t>(world.size());
  std::size_t count = bytes / sizeof(float);
  count -= count % n;  // equal blocks for reduce_scatter and all_gather
  Buffers b(memory, count);

  CollectiveBenchRow row;
  row.op = op;
  row.bytes = count * sizeof(float);
  row.ok = verify(world, *memory, op, b);

  // k: operations per batch, the same on every rank (the slowest rank's estimate).
  world.barrier()->wait();
  auto t0 = Clock::now();
  run_once(world, op, b);
  const double one = reduced(
      world, *memory, std::chrono::duration<double>(Clock::now() - t0).count(), ReduceOp::max);
  const int k = std::clamp(one > 0 ? static_cast<int>(0.02 / one) : 1000, 1, 10000);

  std::vector<double> times;
  for (int r = 0; r < repetitions; ++r) {
    world.barrier()->wait();
    const auto start = Clock::now();
    for (int i = 0; i < k; ++i) run_once(world, op, b);
    times.push_back(std::chrono::duration<double>(Clock::now() - start).count() / k);
  }
  std::sort(times.begin(), times.end());
  const double median = times[times.size() / 2];
  row.time_us_median = median * 1e6;
  row.time_us_min = times.front() * 1e6;
  row.algbw_gbps = static_cast<double>(row.bytes) / median / 1e9;
  row.busbw_gbps = row.algbw_gbps * bus_factor(op, world.size());
  return row;
}

}  // namespace

Collective parse_collective(std::string_view name) {
  for (auto op : {Collective::all_reduce, Collective::reduce_scatter, Collective::all_gather,
                  Collective::broadcast}) {
    if (name == collective_name(op)) return op;
  }
  throw ConfigError("unknown collective '" + std::string(name) +
                    "' (valid: all_reduce, reduce_scatter, all_gather, broadcast)");
}

std::string_view collective_name(Collective op) noexcept {
  switch (op) {
    case Collective::all_reduce: return "all_reduce";
    case Collective::reduce_scatter: return "reduce_scatter";
    case Collective::all_gather: return "all_gather";
    case Collective::broadcast: return "broadcast";
  }
  return "?";
}

bool run_collective_bench(Communicator& world, const std::shared_ptr<DeviceAllocator>& memory,
                          const CollectiveBenchOptions& options, std::ostream& out) {
  TESSERA_CHECK(options.repetitions >= 1, "bench: repetitions must be at least 1");
  const bool printer = world.rank() == 0;
  if (printer && !options.json) {
    char line[160];
    out << "# tessera bench collectives: transport " << options.transport << ", " << world.size()
        << " ranks, buffers on " << to_string(memory->device()) << ", f32 sum, "
        << options.repetitions << " repetitions, median of batches\n";
    std::snprintf(line, sizeof line, "# %-14s %12s %12s %12s %11s %11s %6s\n", "op", "bytes",
                  "median us", "min us", "algbw GB/s", "busbw GB/s", "check");
    out << line << std::flush;
  }
  bool all_ok = true;
  for (auto op : options.ops) {
    for (auto bytes : options.sizes) {
      const auto row = measure(world, memory, op, bytes, options.repetitions);
      all_ok = all_ok && row.ok;
      if (!printer) continue;
      if (options.json) {
        // Microseconds and GB/s to three decimals, as the table prints them.
        const auto milli = [](double value) { return std::round(value * 1000.0) / 1000.0; };
        nlohmann::ordered_json j;
        j["op"] = std::string(collective_name(op));
        j["bytes"] = row.bytes;
        j["time_us_median"] = milli(row.time_us_median);
        j["time_us_min"] = milli(row.time_us_min);
        j["algbw_gbps"] = milli(row.algbw_gbps);
        j["busbw_gbps"] = milli(row.busbw_gbps);
        j["ok"] = row.ok;
        out << j.dump() << "\n" << std::flush;
        continue;
      }
      char line[256];
      std::snprintf(line, sizeof line, "  %-14s %12llu %12.2f %12.2f %11.3f %11.3f %6s\n",
                    collective_name(op).data(), static_cast<unsigned long long>(row.bytes),
                    row.time_us_median, row.time_us_min, row.algbw_gbps, row.busbw_gbps,
                    row.ok ? "ok" : "WRONG");
      out << line << std::flush;
    }
  }
  return all_ok;
}

}  // namespace tessera::cli
