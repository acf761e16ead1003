// Quick collective benchmark of the shm transport: N ranks as N forked processes meeting in a
// `file` store, nccl-tests columns (size, median and min time, algbw, busbw). Not a test; the
// official tool is `tessera bench collectives`.
//
//   tessera_shm_quick_bench [-n RANKS] [--op all_reduce|reduce_scatter|all_gather|broadcast|all]
//                           [--sizes 4K,64M] [--set key=value]...

#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <map>
#include <string>
#include <vector>

#include "tessera/communicator.hpp"
#include "tessera/error.hpp"
#include "tessera/registry.hpp"
#include "tessera/transport.hpp"

namespace {

using Clock = std::chrono::steady_clock;
using namespace tessera;

struct Args {
  int ranks = 2;
  std::vector<std::string> ops = {"all_reduce", "reduce_scatter", "all_gather", "broadcast"};
  std::vector<std::size_t> sizes = {4096, 65536, 1 << 20, 16 << 20, 64 << 20};
  std::map<std::string, std::string> shm_options;
};

Options options_for(const PluginRegistry& registry, PluginKind kind, const std::string& name,
                    std::map<std::string, std::string> values) {
  const auto defaults = registry.default_options(kind, name);
  return Options(defaults.section(), defaults.specs(), std::move(values));
}

double run_op(Communicator& comm, const std::string& op, std::vector<float>& in,
              std::vector<float>& out, std::size_t count) {
  const auto start = Clock::now();
  const int n = comm.size();
  std::shared_ptr<Work> work;
  if (op == "all_reduce") {
    work = comm.all_reduce(view_of(std::span(in.data(), count)), ReduceOp::sum);
  } else if (op == "reduce_scatter") {
    work = comm.reduce_scatter(view_of(std::span(in.data(), count)),
                               view_of(std::span(out.data(), count / static_cast<std::size_t>(n))),
                               ReduceOp::sum);
  } else if (op == "all_gather") {
    work = comm.all_gather(view_of(std::span(in.data(), count / static_cast<std::size_t>(n))),
                           view_of(std::span(out.data(), count)));
  } else {
    work = comm.broadcast(view_of(std::span(in.data(), count)), 0);
  }
  work->wait();
  return std::chrono::duration<double>(Clock::now() - start).count();
}

// Checks one fresh result: inputs are rank + 1 (+ i % 7 for all_reduce), so the answer is known.
bool check(Communicator& comm, const std::string& op, std::size_t count) {
  const int n = comm.size();
  const auto r = static_cast<float>(comm.rank());
  std::vector<float> in(count), out(count);
  for (std::size_t i = 0; i < count; ++i) in[i] = r + 1 + static_cast<float>(i % 7);
  run_op(comm, op, in, out, count);
  const float nf = static_cast<float>(n);
  for (std::size_t i = 0; i < count; ++i) {
    const float base = static_cast<float>(i % 7);
    float expected = 0;
    float got = 0;
    if (op == "all_reduce") {
      expected = nf * (nf + 1) / 2 + nf * base, got = in[i];
    } else if (op == "reduce_scatter") {
      if (i >= count / static_cast<std::size_t>(n)) break;
      const float b = static_cast<float>(
          (i + static_cast<std::size_t>(comm.rank()) * (count / static_cast<std::size_t>(n))) % 7);
      expected = nf * (nf + 1) / 2 + nf * b, got = out[i];
    } else if (op == "all_gather") {
      const std::size_t block = count / static_cast<std::size_t>(n);
      expected = static_cast<float>(i / block) + 1 + static_cast<float>((i % block) % 7),
      got = out[i];
    } else {
      expected = 1 + base, got = in[i];
    }
    if (got != expected) return false;
  }
  return true;
}

int rank_main(const Args& args, int rank, const std::filesystem::path& folder) {
  PluginRegistry registry;
  registry.scan_directory(TESSERA_PLUGIN_DIR);
  auto store = registry.create<Store>(
      "file", options_for(registry, PluginKind::store, "file", {{"path", folder.string()}}));
  auto transport = registry.create<Transport>(
      "shm", options_for(registry, PluginKind::transport, "shm", args.shm_options));
  auto comm = transport->connect(store, rank, args.ranks, std::chrono::seconds(60));
  if (rank == 0) {
    std::printf("# shm quick bench: %d ranks (processes), float32 sum\n", args.ranks);
    std::printf("%-15s %12s %8s %12s %12s %10s %10s %4s\n", "op", "bytes", "iters", "median_us",
                "min_us", "algbw_GB/s", "busbw_GB/s", "ok");
  }
  const double n = args.ranks;
  for (const auto& op : args.ops) {
    for (std::size_t bytes : args.sizes) {
      const std::size_t count = bytes / sizeof(float);
      const bool ok = check(*comm, op, count);
      std::vector<float> in(count, 1.0f), out(count, 0.0f);
      const int iters = static_cast<int>(std::clamp<std::size_t>(
          (std::size_t{1} << 30) / std::max<std::size_t>(bytes, 1), 10, 2000));
      for (int i = 0; i < std::min(iters, 20); ++i) run_op(*comm, op, in, out, count);  // warm up
      comm->barrier()->wait();
      std::vector<double> times;
      for (int i = 0; i < iters; ++i) {
        if (op == "all_reduce") std::fill_n(in.data(), std::min<std::size_t>(count, 16), 1.0f);
        times.push_back(run_op(*comm, op, in, out, count));
      }
      std::sort(times.begin(), times.end());
      const double median = times[times.size() / 2];
      const double algbw = static_cast<double>(bytes) / median / 1e9;
      const double factor = op == "all_reduce"  ? 2 * (n - 1) / n
                            : op == "broadcast" ? 1
                                                : (n - 1) / n;
      if (rank == 0)
        std::printf("%-15s %12zu %8d %12.2f %12.2f %10.2f %10.2f %4s\n", op.c_str(), bytes, iters,
                    median * 1e6, times.front() * 1e6, algbw, algbw * factor, ok ? "yes" : "NO");
      std::fflush(stdout);
    }
  }
  comm->barrier()->wait();
  return 0;
}

std::vector<std::string> split_list(const std::string& text) {
  std::vector<std::string> parts;
  std::size_t start = 0;
  while (start <= text.size()) {
    const auto comma = text.find(',', start);
    parts.push_back(text.substr(start, comma - start));
    if (comma == std::string::npos) break;
    start = comma + 1;
  }
  return parts;
}

}  // namespace

int main(int argc, char** argv) {
  Args args;
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    const std::string value = i + 1 < argc ? argv[i + 1] : "";
    if (arg == "-n") {
      args.ranks = std::stoi(value), ++i;
    } else if (arg == "--op") {
      if (value != "all") args.ops = split_list(value);
      ++i;
    } else if (arg == "--sizes") {
      args.sizes.clear();
      for (const auto& s : split_list(value)) args.sizes.push_back(parse_size(s));
      ++i;
    } else if (arg == "--set") {
      const auto eq = value.find('=');
      args.shm_options[value.substr(0, eq)] = value.substr(eq + 1);
      ++i;
    } else {
      std::fprintf(stderr,
                   "usage: %s [-n RANKS] [--op OPS|all] [--sizes 4K,64M] [--set key=value]\n",
                   argv[0]);
      return 2;
    }
  }
  const auto folder =
      std::filesystem::temp_directory_path() / ("tessera_shm_bench_" + std::to_string(::getpid()));
  std::filesystem::remove_all(folder);
  std::vector<pid_t> children;
  for (int rank = 0; rank < args.ranks; ++rank) {
    const pid_t pid = ::fork();
    if (pid == 0) {
      int code = 1;
      try {
        code = rank_main(args, rank, folder);
      } catch (const std::exception& e) {
        std::fprintf(stderr, "rank %d: %s\n", rank, e.what());
      }
      std::fflush(stdout);
      ::_exit(code);
    }
    children.push_back(pid);
  }
  int failures = 0;
  for (pid_t pid : children) {
    int status = 0;
    ::waitpid(pid, &status, 0);
    if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) ++failures;
  }
  std::filesystem::remove_all(folder);
  return failures == 0 ? 0 : 1;
}
