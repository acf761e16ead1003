#include "bench.hpp"

#include <unistd.h>

#include <algorithm>
#include <boost/program_options.hpp>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <iostream>
#include <sstream>

#include "collective_bench.hpp"
#include "config_flags.hpp"
#include "self_launch.hpp"
#include "tessera/base/error.hpp"
#include "tessera/config/config.hpp"
#include "tessera/launch/launcher.hpp"
#include "tessera/plugin/device_memory_source.hpp"
#include "tessera/plugin/transport.hpp"
#include "tessera/runtime/world.hpp"
#include "tessera/transport_kit/launch_env.hpp"

namespace tessera::cli {

namespace po = boost::program_options;

namespace {

constexpr const char* kUsage =
    "usage: tessera bench collectives --transport NAME [-n N] [--ops LIST] [--sizes LIST]\n"
    "                                 [--reps R] [--json] [--section.key=value ...]\n";

std::vector<std::string> split_list(const std::string& text) {
  std::vector<std::string> items;
  std::stringstream in(text);
  for (std::string item; std::getline(in, item, ',');) {
    if (!item.empty()) items.push_back(item);
  }
  return items;
}

}  // namespace

int run_bench(const std::vector<std::string>& args) {
  if (args.empty() || args.front() != "collectives") {
    std::cerr << kUsage;
    return 2;
  }
  const std::vector<std::string> rest(args.begin() + 1, args.end());

  CollectiveBenchOptions bench;
  std::string transport = "local";
  std::string ops = "all_reduce,reduce_scatter,all_gather,broadcast";
  std::string sizes = "4K,64K,1M,16M,64M";
  int processes = 0;
  po::options_description flags("bench collectives");
  flags.add_options()("help,h", "this help")("transport", po::value(&transport),
                                             "transport plugin (default local)")(
      "n,n", po::value(&processes), "ranks (threads for in-process transports, else processes)")(
      "ops", po::value(&ops), "comma-separated: all_reduce,reduce_scatter,all_gather,broadcast")(
      "sizes", po::value(&sizes), "comma-separated buffer sizes in bytes, K/M/G suffixes")(
      "reps", po::value(&bench.repetitions), "timed repetitions per row (default 15)")(
      "json", po::bool_switch(&bench.json), "one JSON object per row");
  po::variables_map vm;
  const auto config_flags = parse_command_flags(rest, flags, vm, "bench collectives");
  if (vm.count("help") != 0U) {
    std::cout << kUsage << flags;
    return 0;
  }

  for (const auto& op : split_list(ops)) bench.ops.push_back(parse_collective(op));
  for (const auto& size : split_list(sizes)) bench.sizes.push_back(parse_size(size));

  // The remaining --section.key=value words configure the plugins.
  ConfigSources sources;
  sources.flags = config_flags;
  sources.flags.push_back("--runtime.transport=" + transport);
  const LaunchInfo launch = launch_info_from_environment();
  if (processes > 0 && launch.source == "none") {
    sources.flags.push_back("--runtime.world_size=" + std::to_string(processes));
  }
  PluginRegistry registry;
  registry.scan(Config::plugin_search_path(sources));
  const Config config = Config::load(sources, registry);

  const WorldPlan plan = plan_world(config, registry, launch);
  if (plan.needs_workers) {
    return relaunch_as_workers({"bench", "collectives"}, plan.size, rest, registry, true);
  }

  bench.transport = transport;
  // Buffers in the memory the world moves: the host's, or the GPU's for a device transport
  // (whose Transport also hands out that memory, DeviceMemorySource).
  const auto memory_source = config.create<Transport>(registry, "runtime", "transport");
  bool all_ok = true;
  run_world(config, registry, plan, [&](std::shared_ptr<Communicator> world) {
    const Device device =
        world->moves(Device::cpu()) ? Device::cpu() : gpu_moved_by(*world).value_or(Device::cpu());
    const bool ok =
        run_collective_bench(*world, memory_for(*memory_source, device), bench, std::cout);
    if (world->rank() == 0) all_ok = ok;
  });
  return all_ok ? 0 : 1;
}

}  // namespace tessera::cli
