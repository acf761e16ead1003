// Connects N ranks as threads through the named transport, all-reduces every dtype with every
// reduce op, and checks each rank's result bitwise against the rank-order reduction computed
// here with the core kernels: what a user runs to see that a transport works on this machine.

#include "selfcheck.hpp"

#include <charconv>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <exception>
#include <iostream>
#include <thread>

#include "tessera/plugin/store.hpp"
#include "tessera/plugin/transport.hpp"
#include "tessera/registry/registry.hpp"
#include "tessera/transport_kit/reduce.hpp"
#include "usage_error.hpp"

namespace tessera::cli {

namespace {

using Bytes = std::vector<std::byte>;

struct SelfcheckArgs {
  std::string transport = "local";
  int ranks = 4;
  std::size_t count = 65537;  // odd on purpose: no chunking edge lines up
  bool help = false;
};

constexpr const char* kUsage =
    "usage: tessera selfcheck [--transport NAME] [-n RANKS] [--count ELEMENTS]\n"
    "  all-reduces every dtype with every reduce op over RANKS ranks (threads of this\n"
    "  process) and checks the results bitwise against the rank-order reference\n";

template <class T>
T number(const std::string& flag, const std::string& text) {
  T value{};
  const auto [end, error] = std::from_chars(text.data(), text.data() + text.size(), value);
  if (error != std::errc() || end != text.data() + text.size()) {
    throw UsageError("selfcheck: " + flag + " needs a non-negative integer, got '" + text + "'");
  }
  return value;
}

SelfcheckArgs parse(const std::vector<std::string>& args) {
  SelfcheckArgs parsed;
  for (std::size_t i = 0; i < args.size(); ++i) {
    const std::string& arg = args[i];
    const auto value = [&]() -> const std::string& {
      if (i + 1 >= args.size()) throw UsageError("selfcheck: " + arg + " needs a value\n" + kUsage);
      return args[++i];
    };
    if (arg == "--transport") {
      parsed.transport = value();
    } else if (arg == "-n" || arg == "--ranks") {
      parsed.ranks = number<int>(arg, value());
    } else if (arg == "--count") {
      parsed.count = number<std::size_t>(arg, value());
    } else if (arg == "--help" || arg == "-h") {
      parsed.help = true;
    } else {
      throw UsageError("selfcheck: unknown argument '" + arg + "'\n" + kUsage);
    }
  }
  if (parsed.ranks < 1) throw UsageError("selfcheck: -n must be at least 1");
  return parsed;
}

// Small integers, scaled to fractions for float types: every product over a handful of ranks
// stays finite, and float sums still depend on their order.
Bytes rank_values(DType dtype, std::size_t count, int rank) {
  Bytes bytes(count * dtype_size(dtype));
  for (std::size_t i = 0; i < count; ++i) {
    const auto small =
        static_cast<int>((i * 7919 + static_cast<std::size_t>(rank) * 104729) % 11) - 5;
    const float fraction = static_cast<float>(small) / 3.0F + static_cast<float>(rank) / 7.0F;
    std::byte* at = bytes.data() + i * dtype_size(dtype);
    const auto put = [&](auto v) { std::memcpy(at, &v, sizeof(v)); };
    switch (dtype) {
      case DType::f32: put(fraction); break;
      case DType::f64: put(static_cast<double>(fraction)); break;
      case DType::bf16: put(float_to_bf16(fraction)); break;
      case DType::f16: put(float_to_f16(fraction)); break;
      case DType::i32: put(static_cast<std::int32_t>(small)); break;
      case DType::i64: put(static_cast<std::int64_t>(small)); break;
      case DType::u8: put(static_cast<std::uint8_t>(small + 5)); break;
    }
  }
  return bytes;
}

Bytes reference(const std::vector<Bytes>& inputs, DType dtype, ReduceOp op, std::size_t count) {
  Bytes acc = inputs[0];
  for (std::size_t r = 1; r < inputs.size(); ++r)
    reduce_into(acc.data(), inputs[r].data(), count, dtype, op);
  finish_average(acc.data(), count, dtype, op, static_cast<int>(inputs.size()));
  return acc;
}

// The ranks are threads of this process: they meet in the in-process `memory` store.
std::vector<std::shared_ptr<Communicator>> connect_all(const PluginRegistry& registry,
                                                       Transport& transport, int ranks) {
  auto store = registry.create<Store>("memory", Options());
  std::vector<std::shared_ptr<Communicator>> communicators(static_cast<std::size_t>(ranks));
  std::vector<std::exception_ptr> errors(static_cast<std::size_t>(ranks));
  std::vector<std::thread> threads;
  for (int r = 0; r < ranks; ++r) {
    threads.emplace_back([&, r] {
      try {
        communicators[static_cast<std::size_t>(r)] =
            transport.connect(store, r, ranks, std::chrono::seconds(60));
      } catch (...) {
        errors[static_cast<std::size_t>(r)] = std::current_exception();
      }
    });
  }
  for (auto& t : threads) t.join();
  for (const auto& error : errors) {
    if (error) std::rethrow_exception(error);
  }
  return communicators;
}

}  // namespace

int run_selfcheck(const std::vector<std::string>& args) {
  const SelfcheckArgs parsed = parse(args);
  if (parsed.help) {
    std::cout << kUsage;
    return 0;
  }
  PluginRegistry registry;
  registry.scan(PluginRegistry::default_search_path());
  const auto& info = registry.find(PluginKind::transport, parsed.transport);
  auto transport =
      registry.create<Transport>(info.name, registry.default_options(info.kind, info.name));
  auto communicators = connect_all(registry, *transport, parsed.ranks);

  int failures = 0;
  int checks = 0;
  std::cout << "selfcheck: transport " << info.name << ", " << parsed.ranks << " ranks, "
            << parsed.count << " elements\n";
  for (DType dtype : kAllDTypes) {
    std::vector<Bytes> inputs;
    for (int r = 0; r < parsed.ranks; ++r) inputs.push_back(rank_values(dtype, parsed.count, r));
    for (ReduceOp op : kAllReduceOps) {
      const Bytes expected = reference(inputs, dtype, op, parsed.count);
      std::vector<Bytes> data = inputs;
      std::vector<std::shared_ptr<Work>> works;
      const auto start = std::chrono::steady_clock::now();
      for (int r = 0; r < parsed.ranks; ++r) {
        auto& d = data[static_cast<std::size_t>(r)];
        works.push_back(communicators[static_cast<std::size_t>(r)]->all_reduce(
            {d.data(), parsed.count, dtype, Device::cpu()}, op));
      }
      for (auto& work : works) work->wait();
      const std::chrono::duration<double, std::milli> elapsed =
          std::chrono::steady_clock::now() - start;
      int wrong_rank = -1;
      for (int r = 0; r < parsed.ranks && wrong_rank < 0; ++r) {
        if (data[static_cast<std::size_t>(r)] != expected) wrong_rank = r;
      }
      ++checks;
      char line[160];
      std::snprintf(line, sizeof(line), "all_reduce %-4s %-4s %9.3f ms  ",
                    std::string(dtype_name(dtype)).c_str(), std::string(reduce_op_name(op)).c_str(),
                    elapsed.count());
      std::cout << line;
      if (wrong_rank < 0) {
        std::cout << "OK\n";
      } else {
        ++failures;
        std::cout << "FAILED (rank " << wrong_rank << " differs from the rank-order reference)\n";
      }
    }
  }
  std::cout << "selfcheck: " << (checks - failures) << "/" << checks << " OK\n";
  return failures == 0 ? 0 : 1;
}

}  // namespace tessera::cli
