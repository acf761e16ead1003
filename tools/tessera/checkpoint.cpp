#include "checkpoint.hpp"

#include <cstdio>
#include <filesystem>
#include <iostream>
#include <limits>
#include <sstream>

#include "tessera/base/error.hpp"
#include "tessera/plugin/store.hpp"
#include "tessera/plugin/transport.hpp"
#include "tessera/runtime/checkpoint.hpp"
#include "tessera/runtime/registry.hpp"
#include "tessera/strategy_kit/flat_state.hpp"
#include "usage_error.hpp"

namespace tessera::cli {

namespace {

constexpr const char* kUsage = "usage: tessera checkpoint consolidate SRC DST";

std::string text_of(const std::vector<std::byte>& bytes) {
  return {reinterpret_cast<const char*>(bytes.data()), bytes.size()};
}

// The optimizer-state slot count from the "flat/shards" header ("shards N state_per_param S").
std::size_t state_slots(const CheckpointReader& reader) {
  if (!reader.contains("flat/shards")) {
    throw CheckpointError("checkpoint holds no flat parameter state (flat/shards)");
  }
  std::istringstream in(text_of(reader.get("flat/shards")));
  std::string word1, word2;
  std::size_t count = 0, slots = 0;
  if (!(in >> word1 >> count >> word2 >> slots) || word1 != "shards" ||
      word2 != "state_per_param") {
    throw CheckpointError("checkpoint blob 'flat/shards' is malformed");
  }
  return slots;
}

// write_checkpoint is collective; a consolidated checkpoint is written by a group of one.
std::shared_ptr<Communicator> group_of_one() {
  PluginRegistry registry;
  registry.scan(PluginRegistry::default_search_path());
  auto transport =
      registry.create<Transport>("local", registry.default_options(PluginKind::transport, "local"));
  return transport->connect(make_memory_store(), 0, 1, Duration{std::chrono::seconds(60)});
}

int consolidate(const std::filesystem::path& source, const std::filesystem::path& destination) {
  // Otherwise a mistyped path reads as "no manifest: it is incomplete", as if it were damaged.
  if (!std::filesystem::is_directory(source)) {
    throw CheckpointError("checkpoint " + source.string() + " does not exist or is not a folder");
  }
  // A root: its newest checkpoint, as --resume takes it (`latest` is not needed).
  const auto in_root = list_checkpoints(source);
  const FileCheckpointReader reader(in_root.empty() ? source : in_root.back());
  // The destination's checkpoints are never replaced: consolidating twice into one root is
  // a mistake worth hearing about, not a silent overwrite.
  char step_name[32];
  std::snprintf(step_name, sizeof step_name, "step-%012lld",
                static_cast<long long>(reader.manifest().step));
  if (std::filesystem::exists(destination / step_name)) {
    throw CheckpointError("checkpoint " + destination.string() + " already holds " + step_name +
                          ": choose another destination or remove it; nothing was changed");
  }
  const auto layout = FlatLayout::parse(text_of(reader.get("flat/layout")));
  const std::size_t slots = state_slots(reader);
  // Both sizes come from the checkpoint: before allocating by them, the blobs on disk (sizes
  // verified by the reader) must hold that much, so a forged layout cannot ask for terabytes.
  std::uint64_t param_bytes = 0;
  std::uint64_t state_bytes = 0;
  for (const auto& blob : reader.manifest().blobs) {
    if (blob.name.rfind("flat/params/", 0) == 0) param_bytes += blob.bytes;
    if (blob.name.rfind("flat/optimizer_state/", 0) == 0) state_bytes += blob.bytes;
  }
  if (layout.total > param_bytes / sizeof(float) ||
      (slots > 0 && layout.total > state_bytes / sizeof(float) / slots)) {
    throw CheckpointError("checkpoint " + reader.folder().string() + ": its layout has " +
                          std::to_string(layout.total) + " parameters with " +
                          std::to_string(slots) + " optimizer slots each, but its blobs hold " +
                          std::to_string(param_bytes) + " and " + std::to_string(state_bytes) +
                          " bytes");
  }
  std::vector<float> params(layout.total);
  std::vector<float> state(layout.total * slots);
  load_flat_range(reader, layout, 0, layout.total, params, state, slots);

  auto metadata = reader.manifest().metadata;
  metadata["consolidated_from_world_size"] = std::to_string(reader.saved_world_size());
  const FlatShard whole{0, layout.total};
  auto group = group_of_one();
  const auto written = write_checkpoint(
      destination, reader.manifest().step, metadata, *group,
      [&](CheckpointWriter& writer) {
        save_flat_shard(writer, layout, std::span<const FlatShard>(&whole, 1), 0, params, state,
                        slots, true);
      },
      CheckpointRetention{}, group->timeout());
  std::cout << "consolidated " << reader.folder().string() << " (world size "
            << reader.saved_world_size() << ", " << layout.total << " parameters, " << slots
            << " optimizer slots each) into " << written.string() << "\n";
  return 0;
}

}  // namespace

int run_checkpoint(const std::vector<std::string>& args) {
  if (args.size() == 1 && (args[0] == "--help" || args[0] == "-h")) {
    std::cout << kUsage << "\n";
    return 0;
  }
  if (args.empty() || args[0] != "consolidate") {
    throw UsageError(std::string("unknown checkpoint command; ") + kUsage);
  }
  if (args.size() != 3) throw UsageError(kUsage);
  return consolidate(args[1], args[2]);
}

}  // namespace tessera::cli
