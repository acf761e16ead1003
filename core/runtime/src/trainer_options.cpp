#include <charconv>
#include <string_view>

#include "tessera/base/error.hpp"
#include "tessera/plugin/device_memory_source.hpp"
#include "tessera/plugin/transport.hpp"
#include "tessera/runtime/trainer.hpp"

namespace tessera {

namespace {

std::int64_t at_least(const Options& train, const std::string& key, std::int64_t minimum) {
  const std::int64_t value = train.get_int(key);
  if (value < minimum) {
    throw ConfigError("[train] " + key + " = " + std::to_string(value) + ": must be at least " +
                      std::to_string(minimum));
  }
  return value;
}

ProgressMode parse_progress(const std::string& text) {
  if (text == "auto") return ProgressMode::automatic;
  if (text == "bar") return ProgressMode::bar;
  if (text == "lines") return ProgressMode::lines;
  return ProgressMode::off;
}

// A whole number >= 1, all of `text`.
bool parse_step(std::string_view text, std::int64_t& step) {
  const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), step);
  return ec == std::errc() && end == text.data() + text.size() && step >= 1;
}

}  // namespace

void TraceOptions::set_steps(const std::string& text) {
  const auto colon = text.find(':');
  std::int64_t first = 0;
  std::int64_t last = kNoLastStep;
  const bool ok =
      colon != std::string::npos && parse_step(std::string_view(text).substr(0, colon), first) &&
      (colon + 1 == text.size() || parse_step(std::string_view(text).substr(colon + 1), last)) &&
      first <= last;
  if (!ok) {
    throw ConfigError("[train] trace_steps (--trace-steps) = '" + text +
                      "': expected FIRST:LAST or FIRST: (to the end), whole steps with "
                      "1 <= FIRST <= LAST, e.g. 1:100");
  }
  first_step = first;
  last_step = last;
}

TrainerOptions TrainerOptions::from(const Options& train) {
  TrainerOptions o;
  o.epochs = at_least(train, "epochs", 1);
  o.max_steps = at_least(train, "max_steps", 0);
  o.batch_size = static_cast<std::size_t>(at_least(train, "batch_size", 1));
  o.micro_batches = static_cast<std::size_t>(at_least(train, "micro_batches", 1));
  o.eval_batch_size = static_cast<std::size_t>(at_least(train, "eval_batch_size", 1));
  o.eval_samples = static_cast<std::size_t>(at_least(train, "eval_samples", 0));
  o.schedule.kind = parse_schedule_kind(train.get_string("schedule"));
  o.schedule.base_lr = static_cast<float>(train.get_float("lr"));
  o.schedule.warmup_steps = at_least(train, "warmup_steps", 0);
  o.schedule.step_size = at_least(train, "step_size", 1);
  o.schedule.gamma = static_cast<float>(train.get_float("gamma"));
  o.schedule.min_lr = static_cast<float>(train.get_float("min_lr"));
  o.max_grad_norm = train.get_float("max_grad_norm");
  if (o.max_grad_norm < 0.0) throw ConfigError("[train] max_grad_norm must not be negative");
  o.seed = static_cast<std::uint64_t>(at_least(train, "seed", 0));
  o.eval_every = at_least(train, "eval_every", 0);
  o.checkpoint_dir = train.get_string("checkpoint_dir");
  o.checkpoint_every = at_least(train, "checkpoint_every", 0);
  o.checkpoint_keep = static_cast<std::size_t>(at_least(train, "checkpoint_keep", 1));
  o.metrics_file = train.get_string("metrics_file");
  o.progress = parse_progress(train.get_string("progress"));
  o.skip_nonfinite_steps = train.get_string("on_nonfinite") == "skip";
  o.trace.file = train.get_string("trace_file");
  o.trace.set_steps(train.get_string("trace_steps"));
  o.trace.max_events = static_cast<std::size_t>(at_least(train, "trace_max_events", 1000));
  return o;
}

namespace {

// [runtime] device = cuda: the allocator of the GPU the world's transport moves for this rank.
std::shared_ptr<DeviceAllocator> gpu_memory_of(const Config& config, const PluginRegistry& registry,
                                               const Communicator& world) {
  const std::string transport = config.section("runtime").get_string("transport");
  if (const auto gpu = gpu_moved_by(world)) {
    // The transport object hands out memory of its devices (DeviceMemorySource); a second one
    // of the same plugin, unconnected, gives the same allocator.
    const auto source = config.create<Transport>(registry, "runtime", "transport");
    return memory_for(*source, *gpu);
  }
  throw ConfigError("[runtime] device = cuda: transport '" + transport +
                    "' moves host memory only, so the model cannot train on a GPU with it; set "
                    "[runtime] transport = nccl (one GPU per rank), or device = cpu");
}

}  // namespace

TrainerComponents build_trainer_components(const Config& config, const PluginRegistry& registry,
                                           std::shared_ptr<Communicator> world) {
  TrainerComponents parts;
  parts.world = std::move(world);
  parts.model = config.create<Model>(registry, "train", "model");
  parts.optimizer = config.create<Optimizer>(registry, "train", "optimizer");
  parts.dataset = config.create<Dataset>(registry, "train", "dataset");
  parts.strategy = config.create<Strategy>(registry, "train", "strategy");
  const auto& strategy_info =
      registry.find(PluginKind::strategy, config.section("train").get_string("strategy"));
  parts.strategy_name = strategy_info.name;
  parts.strategy_capabilities = strategy_info.capabilities;
  for (const auto* info : registry.plugins(PluginKind::strategy)) {
    parts.known_strategies.push_back(info->name);
  }
  if (config.section("runtime").get_string("device") == "cuda") {
    parts.allocator = gpu_memory_of(config, registry, *parts.world);
  }
  return parts;
}

}  // namespace tessera
