#include "tessera/runtime/run_check.hpp"

#include <sys/resource.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <vector>

#include "tessera/base/error.hpp"
#include "tessera/plugin/dataset.hpp"
#include "tessera/plugin/model.hpp"
#include "tessera/plugin/optimizer.hpp"
#include "tessera/plugin/strategy.hpp"
#include "tessera/plugin/transport.hpp"

namespace tessera {

namespace {

const std::string& value_of(const Config& config, const std::string& section,
                            const std::string& key) {
  return config.section(section).values().at(key);
}

// "[train] warmup_steps = 100 (run.ini:12)".
std::string described(const Config& config, const std::string& section, const std::string& key) {
  return "[" + section + "] " + key + " = " + value_of(config, section, key) + " (" +
         value_origin(config, section, key) + ")";
}

// The message prefix: where the value that the message is about was written, when it was.
std::string lead(const Config& config, const std::string& section, const std::string& key) {
  const std::string origin = value_origin(config, section, key);
  return origin == "default" ? std::string() : origin + ": ";
}

// Every value of `section` that some source set, with where: "layers (run.ini:7), threads
// (flag --model.mlp.threads)"; empty when all are defaults.
std::string set_values(const Config& config, const std::string& section) {
  std::string out;
  for (const auto& [key, value] : config.section(section).values()) {
    const std::string origin = value_origin(config, section, key);
    if (origin == "default") continue;
    out += (out.empty() ? "" : ", ") + key + " = " + value + " (" + origin + ")";
  }
  return out;
}

// The lead of a message about the values of several `sections` together: every flag and
// variable that set one of them, then the first file line that did ("flag
// --strategy.hybrid.tensor_parallel, run.ini:30: "), so that a value given on the command line
// is never reported under the file line of another key; "" when all are defaults.
std::string sources_lead(const Config& config, std::initializer_list<std::string> sections) {
  std::vector<std::string> outside_file;
  std::string file_line;
  for (const auto& section : sections) {
    for (const auto& [key, value] : config.section(section).values()) {
      const std::string origin = value_origin(config, section, key);
      if (origin == "default") continue;
      if (origin.starts_with("flag ") || origin.starts_with("environment ")) {
        if (std::find(outside_file.begin(), outside_file.end(), origin) == outside_file.end())
          outside_file.push_back(origin);
      } else if (file_line.empty()) {
        file_line = origin;
      }
    }
  }
  if (!file_line.empty()) outside_file.push_back(file_line);
  std::string out;
  for (const auto& origin : outside_file) out += (out.empty() ? "" : ", ") + origin;
  return out.empty() ? out : out + ": ";
}

std::string human_bytes(double bytes) {
  const char* units[] = {"B", "KiB", "MiB", "GiB", "TiB", "PiB", "EiB"};
  std::size_t unit = 0;
  while (bytes >= 1024.0 && unit + 1 < std::size(units)) {
    bytes /= 1024.0;
    ++unit;
  }
  char text[64];
  std::snprintf(text, sizeof text, unit == 0 ? "%.0f %s" : "%.1f %s", bytes, units[unit]);
  return text;
}

// A plugin selected by [section] key, created as the run would create it. A refusal from its
// constructor (a ConfigError, a DataError for a missing file, or a failed check) becomes a
// ConfigError that leads with where the plugin's own values were set.
template <class Interface>
std::shared_ptr<Interface> create_plugin(const Config& config, const PluginRegistry& registry,
                                         const std::string& section, const std::string& key) {
  const auto& info =
      registry.find(interface_kind<Interface>::value, value_of(config, section, key));
  const std::string plugin_section = std::string(plugin_kind_name(info.kind)) + "." + info.name;
  auto refuse = [&](const std::exception& e) {
    const std::string set = set_values(config, plugin_section);
    return ConfigError(sources_lead(config, {plugin_section}) + "[" + plugin_section +
                       "] refused its options: " + e.what() +
                       (set.empty() ? " (all its options are defaults; selected by " +
                                          described(config, section, key) + ")"
                                    : " (values set: " + set + ")"));
  };
  try {
    return registry.create<Interface>(info.name, config.plugin(info.kind, info.name));
  } catch (const ConfigError& e) {
    throw refuse(e);
  } catch (const DataError& e) {
    throw refuse(e);
  } catch (const InvalidArgument& e) {
    throw refuse(e);
  }
}

void check_model_fits_data(const Config& config, const Model& model, const Dataset& data) {
  if (data.layout() == model.layout()) return;
  const std::string model_section = "model." + value_of(config, "train", "model");
  const std::string data_section = "dataset." + value_of(config, "train", "dataset");
  std::string set = set_values(config, data_section);
  const std::string model_set = set_values(config, model_section);
  if (!model_set.empty()) set += (set.empty() ? "" : "; ") + model_set;
  std::string where = sources_lead(config, {data_section, model_section});
  if (where.empty()) where = lead(config, "train", "dataset");
  throw ConfigError(where + "the data set gives samples of " + describe(data.layout()) +
                    ", the model takes " + describe(model.layout()) + "; make [" + model_section +
                    "] and [" + data_section + "] agree" +
                    (set.empty() ? std::string() : " (values set: " + set + ")"));
}

// The whole model's fp32 parameters and gradients once, plus the optimizer's state: every
// strategy holds at least that much on a single host, whatever it shards.
void check_model_fits_host(const Config& config, const Model& model, const Optimizer& optimizer) {
  double elements = 0;
  for (std::size_t i = 0; i < model.layer_count(); ++i) {
    for (const auto& spec : model.layer(i).parameters()) {
      if (!spec.tied_to.empty()) continue;  // its owner's, counted there
      double n = 1;
      for (auto d : spec.shape) n *= static_cast<double>(d);
      elements += n;
    }
  }
  const double bytes = elements * 4.0 * (2.0 + static_cast<double>(optimizer.state_per_param()));
  const double memory =
      static_cast<double>(sysconf(_SC_PHYS_PAGES)) * static_cast<double>(sysconf(_SC_PAGESIZE));
  if (memory <= 0 || bytes <= memory) return;
  const std::string section = "model." + value_of(config, "train", "model");
  const std::string set = set_values(config, section);
  const std::string where = sources_lead(config, {section});
  char count[64];
  std::snprintf(count, sizeof count, "%.4g", elements);
  throw ConfigError(where + "the model has " + count + " parameters: with their gradients and " +
                    value_of(config, "train", "optimizer") + "'s state that is " +
                    human_bytes(bytes) + " of fp32, more than this host's " + human_bytes(memory) +
                    " of memory" + (set.empty() ? std::string() : " (values set: " + set + ")"));
}

RunFigures check_training(const Config& config, std::size_t train_samples, int world_size,
                          int data_parallel_size) {
  const auto& train = config.section("train");
  RunFigures f;
  f.world_size = world_size;
  f.data_parallel_size = data_parallel_size;
  f.train_samples = train_samples;
  const auto batch = static_cast<std::size_t>(train.get_int("batch_size"));
  const std::size_t global = batch * static_cast<std::size_t>(data_parallel_size);
  f.steps_per_epoch = (train_samples + global - 1) / global;
  const std::int64_t epochs = train.get_int("epochs");
  const std::int64_t max_steps = train.get_int("max_steps");
  f.total_steps = epochs * static_cast<std::int64_t>(f.steps_per_epoch);
  std::string steps_text =
      std::to_string(f.total_steps) + " steps (" + std::to_string(epochs) + " epoch" +
      (epochs == 1 ? "" : "s") + " of " + std::to_string(f.steps_per_epoch) + ": " +
      std::to_string(train_samples) + " samples / (" +
      (data_parallel_size == world_size
           ? std::to_string(world_size) + " rank" + (world_size == 1 ? "" : "s")
           : std::to_string(data_parallel_size) + " data-parallel replica" +
                 (data_parallel_size == 1 ? "" : "s") + " of " + std::to_string(world_size) +
                 " ranks") +
      " x batch_size " + std::to_string(batch) + "), rounded up)";
  if (max_steps > 0 && max_steps < f.total_steps) {
    f.total_steps = max_steps;
    steps_text =
        std::to_string(max_steps) + " steps (" + described(config, "train", "max_steps") + ")";
  }

  if (train.get_int("micro_batches") > train.get_int("batch_size")) {
    throw ConfigError(lead(config, "train", "micro_batches") +
                      described(config, "train", "micro_batches") + " is more than " +
                      described(config, "train", "batch_size") +
                      ": every micro-batch needs at least one sample");
  }
  if (train.get_string("schedule") == "cosine") {
    if (train.get_int("warmup_steps") >= f.total_steps) {
      throw ConfigError(lead(config, "train", "warmup_steps") +
                        described(config, "train", "warmup_steps") +
                        " leaves no steps to decay: the run has " + steps_text +
                        "; lower warmup_steps or run longer");
    }
    if (train.get_float("min_lr") > train.get_float("lr")) {
      throw ConfigError(lead(config, "train", "min_lr") + described(config, "train", "min_lr") +
                        " is above " + described(config, "train", "lr") +
                        ": the cosine schedule decays from lr down to min_lr");
    }
  }
  if (value_of(config, "train", "checkpoint_dir").empty() &&
      train.get_int("checkpoint_every") > 0) {
    throw ConfigError(lead(config, "train", "checkpoint_every") +
                      described(config, "train", "checkpoint_every") +
                      " but [train] checkpoint_dir is empty, so no checkpoint would be written; "
                      "set checkpoint_dir or remove checkpoint_every");
  }
  return f;
}

// A required option (no default) of a selected plugin that no source set: the plugin would
// refuse it only when created in the ranks.
void check_required_options(const Config& config, const PluginRegistry& registry,
                            const std::string& section, const std::string& key, PluginKind kind) {
  const auto& info = registry.find(kind, value_of(config, section, key));
  const std::string plugin_section = std::string(plugin_kind_name(kind)) + "." + info.name;
  const auto& options = config.section(plugin_section);
  for (const auto& spec : options.specs()) {
    if (options.values().contains(spec.name)) continue;
    std::string variable = "TESSERA_" + plugin_section + "_" + spec.name;
    for (char& c : variable) {
      if (c == '.' || c == '-') c = '_';
      if (c >= 'a' && c <= 'z') c = static_cast<char>(c - 'a' + 'A');
    }
    throw ConfigError(lead(config, section, key) + "[" + plugin_section + "] " + spec.name +
                      " is required (" + spec.help + ") and no source sets it; the plugin is " +
                      "selected by " + described(config, section, key) + "; set it in [" +
                      plugin_section + "], with --" + plugin_section + "." + spec.name +
                      "=VALUE or " + variable);
  }
}

}  // namespace

std::string value_origin(const Config& config, const std::string& section, const std::string& key) {
  return config.origin(section, key).text;
}

void check_host_can_run(int ranks, bool processes, const std::string& what) {
  const long cores = sysconf(_SC_NPROCESSORS_ONLN);
  if (cores > 0 && ranks > kMaxRanksPerCore * cores) {
    throw ConfigError(what + ": " + std::to_string(ranks) + " ranks is more than this host runs (" +
                      std::to_string(cores) + " cores online, at most " +
                      std::to_string(kMaxRanksPerCore) +
                      " ranks per core: " + std::to_string(kMaxRanksPerCore * cores) +
                      "); use fewer ranks or more hosts");
  }
  rlimit limit{};
  if (processes && getrlimit(RLIMIT_NPROC, &limit) == 0 && limit.rlim_cur != RLIM_INFINITY &&
      static_cast<rlim_t>(ranks) >= limit.rlim_cur) {
    throw ConfigError(what + ": " + std::to_string(ranks) +
                      " processes reach this user's process limit (ulimit -u: " +
                      std::to_string(limit.rlim_cur) + ")");
  }
}

RunFigures check_run(const Config& config, const PluginRegistry& registry) {
  struct Selection {
    const char* section;
    const char* key;
    PluginKind kind;
  };
  constexpr Selection kSelections[] = {{"runtime", "transport", PluginKind::transport},
                                       {"runtime", "store", PluginKind::store},
                                       {"train", "strategy", PluginKind::strategy},
                                       {"train", "optimizer", PluginKind::optimizer},
                                       {"train", "model", PluginKind::model},
                                       {"train", "dataset", PluginKind::dataset}};
  for (const auto& s : kSelections)
    check_required_options(config, registry, s.section, s.key, s.kind);

  (void)create_plugin<Transport>(config, registry, "runtime", "transport");
  const auto world_size = static_cast<int>(config.section("runtime").get_int("world_size"));
  const auto& transport =
      registry.find(PluginKind::transport, value_of(config, "runtime", "transport"));
  const bool processes = transport.capabilities.spans_processes;
  if (value_of(config, "runtime", "device") == "cuda") {
    // The trainer would find out only once every rank had connected.
    const auto& devices = transport.capabilities.devices;
    if (std::find(devices.begin(), devices.end(), DeviceType::cuda) == devices.end()) {
      throw ConfigError(lead(config, "runtime", "device") + described(config, "runtime", "device") +
                        ", but the transport " + described(config, "runtime", "transport") +
                        " moves host memory only; use [runtime] transport = nccl (one GPU per "
                        "rank), or device = cpu");
    }
    // A strategy declares where its state may live (TESSERA_DEVICE_CUDA, plugin ABI 2.3).
    const auto& strategy =
        registry.find(PluginKind::strategy, value_of(config, "train", "strategy"));
    const auto& homes = strategy.capabilities.devices;
    if (std::find(homes.begin(), homes.end(), DeviceType::cuda) == homes.end()) {
      throw ConfigError(lead(config, "runtime", "device") + described(config, "runtime", "device") +
                        ", but the strategy " + described(config, "train", "strategy") +
                        " keeps its state in host memory (its plugin declares no "
                        "TESSERA_DEVICE_CUDA); train on the GPU with a strategy whose `tessera "
                        "plugins` line says devices cuda, or keep device = cpu");
    }
  }
  check_host_can_run(
      world_size, processes,
      lead(config, "runtime", "world_size") + described(config, "runtime", "world_size"));

  const auto strategy = create_plugin<Strategy>(config, registry, "train", "strategy");
  const auto optimizer = create_plugin<Optimizer>(config, registry, "train", "optimizer");
  const auto model = create_plugin<Model>(config, registry, "train", "model");
  check_model_fits_host(config, *model, *optimizer);
  int data_parallel_size = world_size;
  try {
    data_parallel_size = strategy->plan_data_parallel_size(*model, world_size);
  } catch (const ConfigError& e) {
    // The strategy names its options and the figures; add where they were set.
    const std::string section = "strategy." + value_of(config, "train", "strategy");
    std::string where = sources_lead(config, {section});
    if (where.empty()) where = lead(config, "train", "strategy");
    const std::string set = set_values(config, section);
    throw ConfigError(where + e.what() + " (" + described(config, "runtime", "world_size") +
                      (set.empty() ? std::string() : "; values set: " + set) + ")");
  }
  if (data_parallel_size < 1 || world_size % data_parallel_size != 0) {
    throw PluginError("the strategy " + value_of(config, "train", "strategy") + " planned " +
                      std::to_string(data_parallel_size) + " data-parallel replicas of " +
                      std::to_string(world_size) +
                      " ranks, which is not a divisor of the world; report it to the plugin's "
                      "author");
  }
  const auto data = create_plugin<Dataset>(config, registry, "train", "dataset");
  check_model_fits_data(config, *model, *data);
  if (data->size(Split::train) == 0) {
    throw ConfigError(lead(config, "train", "dataset") + "the data set " +
                      described(config, "train", "dataset") + " has no training samples");
  }
  return check_training(config, data->size(Split::train), world_size, data_parallel_size);
}

}  // namespace tessera
