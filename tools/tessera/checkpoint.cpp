#include "checkpoint.hpp"

#include <cstdio>
#include <filesystem>
#include <iostream>

#include "tessera/base/error.hpp"
#include "tessera/plugin/store.hpp"
#include "tessera/plugin/transport.hpp"
#include "tessera/registry/registry.hpp"
#include "tessera/runtime/checkpoint.hpp"
#include "tessera/strategy_kit/param_checkpoint.hpp"
#include "usage_error.hpp"

namespace tessera::cli {

namespace {

constexpr const char* kUsage =
    "usage: tessera checkpoint consolidate SRC DST\n"
    "       tessera checkpoint inspect CHECKPOINT";

// write_checkpoint is collective; a consolidated checkpoint is written by a group of one.
std::shared_ptr<Communicator> group_of_one() {
  PluginRegistry registry;
  registry.scan(PluginRegistry::default_search_path());
  auto transport =
      registry.create<Transport>("local", registry.default_options(PluginKind::transport, "local"));
  return transport->connect(registry.create<Store>("memory", Options()), 0, 1,
                            Duration{std::chrono::seconds(60)});
}

int consolidate(const std::filesystem::path& source, const std::filesystem::path& destination) {
  const FileCheckpointReader reader(checkpoint_folder(source));
  // The destination's checkpoints are never replaced: consolidating twice into one root is
  // a mistake worth hearing about, not a silent overwrite.
  char step_name[32];
  std::snprintf(step_name, sizeof step_name, "step-%012lld",
                static_cast<long long>(reader.manifest().step));
  if (std::filesystem::exists(destination / step_name)) {
    throw CheckpointError("checkpoint " + destination.string() + " already holds " + step_name +
                          ": choose another destination or remove it; nothing was changed");
  }
  const SliceReader slices(reader);
  // Before anything is allocated by the index's shapes: the blobs on disk (sizes verified by
  // the reader) must cover every parameter and slot exactly, so a forged index cannot ask
  // for terabytes.
  slices.verify();
  const auto& index = slices.index();
  struct Whole {
    StateSlice slice;
    std::vector<float> values;
  };
  std::vector<Whole> wholes;
  std::size_t elements = 0;
  for (const auto& p : index.params) {
    const std::size_t rows = p.shape.empty() ? 1 : p.shape[0];
    StateSlice slice{p.layer, p.name, p.shape, StateKind::parameter, 0, 0, 0, rows, 0, 0};
    for (std::size_t k = 0; k <= index.state_per_param; ++k) {
      slice.kind = k == 0 ? StateKind::parameter : StateKind::optimizer_state;
      slice.slot = k == 0 ? 0 : k - 1;
      auto values = slices.read_slice(p, slice.kind, slice.slot, 0, 0, rows);
      slice.last = values.size();
      wholes.push_back({slice, std::move(values)});
    }
    elements += wholes.back().values.size();
  }

  auto metadata = reader.manifest().metadata;
  metadata["consolidated_from_world_size"] = std::to_string(reader.saved_world_size());
  auto group = group_of_one();
  const auto written = write_checkpoint(
      destination, reader.manifest().step, metadata, *group,
      [&](CheckpointWriter& writer) {
        save_param_index(writer, index);
        for (const auto& w : wholes) writer.put_slice(w.slice, w.values);
      },
      CheckpointRetention{}, group->timeout());
  std::cout << "consolidated " << reader.folder().string() << " (format "
            << reader.manifest().format_version << ", world size " << reader.saved_world_size()
            << ", " << index.params.size() << " parameters of " << elements << " elements, "
            << index.state_per_param << " optimizer slots each) into " << written.string() << "\n";
  return 0;
}

std::string kind_text(const StateSlice& s) {
  return s.kind == StateKind::parameter ? std::string("values")
                                        : "optimizer slot " + std::to_string(s.slot);
}

// What a checkpoint holds, for a person: its manifest's fields, then every parameter with the
// blobs that hold it (format 2) or the flat shards (format 1), after checking that they cover it.
int inspect(const std::filesystem::path& source) {
  const FileCheckpointReader reader(checkpoint_folder(source));
  const auto& manifest = reader.manifest();
  const SliceReader slices(reader);
  slices.verify();
  const auto& index = slices.index();
  std::cout << "checkpoint " << reader.folder().string() << "\n"
            << "  format " << manifest.format_version << ", step " << manifest.step
            << ", written by " << manifest.world_size << " rank(s)"
            << (index.strategy.empty() ? std::string() : " of strategy " + index.strategy) << ", "
            << index.state_per_param << " optimizer slot(s) per element, " << manifest.blobs.size()
            << " blobs\n";
  for (const auto& [key, value] : manifest.metadata) {
    std::cout << "  meta " << key << " = " << value << "\n";
  }
  for (const auto& p : index.params) {
    std::cout << "  parameter " << p.layer << "." << p.name << " [" << shape_text(p.shape) << "]\n";
    for (const auto& blob : manifest.blobs) {
      if (!blob.slice || blob.slice->layer != p.layer || blob.slice->param != p.name) continue;
      const auto& s = *blob.slice;
      std::cout << "    rank " << blob.rank << "  " << kind_text(s) << "  dim " << s.dim << " ["
                << s.begin << ", " << s.end << ") elements [" << s.first << ", " << s.last << ")  "
                << blob.file << "\n";
    }
  }
  if (manifest.format_version == 1) {
    std::cout << "  (format 1: parameters are cut from flat shards; consolidate writes format "
                 "2)\n";
  }
  std::cout << "every parameter and optimizer slot is covered exactly once\n";
  return 0;
}

}  // namespace

std::filesystem::path checkpoint_folder(const std::filesystem::path& source) {
  // Otherwise a mistyped path reads as "no manifest: it is incomplete", as if it were damaged.
  if (!std::filesystem::is_directory(source)) {
    throw CheckpointError("checkpoint " + source.string() + " does not exist or is not a folder");
  }
  const auto in_root = list_checkpoints(source);
  return in_root.empty() ? source : in_root.back();
}

int run_checkpoint(const std::vector<std::string>& args) {
  if (args.size() == 1 && (args[0] == "--help" || args[0] == "-h")) {
    std::cout << kUsage << "\n";
    return 0;
  }
  if (!args.empty() && args[0] == "consolidate") {
    if (args.size() != 3) throw UsageError(kUsage);
    return consolidate(args[1], args[2]);
  }
  if (!args.empty() && args[0] == "inspect") {
    if (args.size() != 2) throw UsageError(kUsage);
    return inspect(args[1]);
  }
  throw UsageError(std::string("unknown checkpoint command; ") + kUsage);
}

}  // namespace tessera::cli
