// `tessera train --config FILE [-n N] [--resume] [--summary FILE] [--trace FILE]
// [--trace-steps FIRST:LAST] [--section.key=value ...]`.
// In-process transports run the ranks as threads here; multi-process ones re-execute this
// command through the launcher, one worker per rank. Everything else is the public Trainer.

#include "train.hpp"

#include <algorithm>
#include <boost/program_options.hpp>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <iostream>

#include "config_flags.hpp"
#include "lost_store.hpp"
#include "self_launch.hpp"
#include "tessera/config/config.hpp"
#include "tessera/elastic/elastic_options.hpp"
#include "tessera/elastic/elastic_run.hpp"
#include "tessera/launch/launcher.hpp"
#include "tessera/registry/registry.hpp"
#include "tessera/runtime/run_check.hpp"
#include "tessera/runtime/trace_files.hpp"
#include "tessera/runtime/trainer.hpp"
#include "tessera/runtime/world.hpp"
#include "tessera/transport_kit/launch_env.hpp"
#include "usage_error.hpp"

namespace tessera::cli {

namespace {

namespace po = boost::program_options;

constexpr const char* kUsage =
    "usage: tessera train --config FILE [-n N] [--resume] [--summary FILE] [--trace FILE]\n"
    "                     [--trace-steps FIRST:LAST] [--section.key=value ...]\n"
    "  trains the [train] section's model (docs/training.md); N ranks are threads of this\n"
    "  process for in-process transports (local) and launched processes otherwise (shm)\n"
    "  --trace writes each rank's Chrome trace (docs/tracing.md) to FILE with .rankR before\n"
    "  its extension; 'tessera trace merge' joins them into one file for Perfetto\n";

}  // namespace

int run_train(const std::vector<std::string>& args) {
  std::string config_file;
  std::string summary_file;
  std::string processes_text;
  std::string trace_file;
  std::string trace_steps;
  bool resume = false;
  po::options_description flags("train");
  flags.add_options()("help,h", "this help")("config", po::value(&config_file), "INI file")(
      "n,n", po::value(&processes_text),
      "ranks (threads for in-process transports, else processes)")(
      "resume", po::bool_switch(&resume), "continue from the newest checkpoint in checkpoint_dir")(
      "summary", po::value(&summary_file), "write a JSON summary of the run here (rank 0)")(
      "trace", po::value(&trace_file),
      "[train] trace_file: each rank's Chrome trace-event JSON, FILE with .rankR inserted")(
      "trace-steps", po::value(&trace_steps),
      "[train] trace_steps: steps recorded, FIRST:LAST or FIRST: (default 1:100)");
  po::variables_map vm;
  const auto config_flags = parse_command_flags(args, flags, vm, "train");
  if (vm.count("help") != 0U) {
    std::cout << kUsage << flags;
    return 0;
  }

  ConfigSources sources;
  if (!config_file.empty()) sources.file = config_file;
  sources.flags = config_flags;
  const LaunchInfo launch = launch_info_from_environment();
  if (vm.count("n") != 0U) sources.flags.push_back(world_size_flag("train", processes_text));
  // --trace and --trace-steps are their [train] options under shorter names, winning as -n does.
  if (vm.count("trace") != 0U) sources.flags.push_back("--train.trace_file=" + trace_file);
  if (vm.count("trace-steps") != 0U) sources.flags.push_back("--train.trace_steps=" + trace_steps);
  PluginRegistry registry;
  registry.scan(Config::plugin_search_path(sources));
  const Config config = Config::load(sources, registry, elastic_sections());
  // Every mistake a config can hold is found here, before a worker or a rank thread starts;
  // launched workers skip it, their launcher's process did it.
  if (launch.source == "none") {
    check_elastic_run(config, check_run(config, registry));
    const TrainerOptions checked = TrainerOptions::from(config.section("train"));
    if (!checked.trace.file.empty()) check_trace_destination(checked.trace.file, 0);
  }

  const WorldPlan plan = plan_world(config, registry, launch);
  const bool elastic = is_elastic(config);
  if (plan.needs_workers) {
    std::optional<ElasticLaunch> how;
    if (elastic) {
      how = ElasticLaunch{static_cast<int>(config.section("elastic").get_int("max_restarts"))};
    }
    return relaunch_as_workers({"train"}, plan.size, args, registry, false, how);
  }

  const TrainerOptions options = TrainerOptions::from(config.section("train"));
  const auto report = [&](const TrainResult& result) {
    if (result.rank != 0) return;
    if (result.tokens_per_s > 0.0) {
      // A language model: accuracy is per token, and the loss is what people compare.
      std::printf("test loss %.4f  perplexity %.2f", result.test_loss, std::exp(result.test_loss));
      if (result.test_bits_per_byte > 0.0)
        std::printf("  %.3f bits/byte", result.test_bits_per_byte);
      std::printf("  token accuracy %.2f %%  (%lld steps, %.1f s, %.0f tokens/s)\n",
                  100.0 * result.test_accuracy, static_cast<long long>(result.steps),
                  result.seconds, result.tokens_per_s);
    } else {
      std::printf("test accuracy %.2f %%  (%lld steps, %.1f s, %.0f samples/s)\n",
                  100.0 * result.test_accuracy, static_cast<long long>(result.steps),
                  result.seconds, result.samples_per_s);
    }
    std::fflush(stdout);
    if (!summary_file.empty()) write_summary_json(summary_file, result);
  };
  if (elastic) {
    // Set when the run failed after the store left this worker's lease renewals unanswered
    // past the lease's end: the store's outage, whether or not it answers again now.
    std::optional<Duration> store_silence;
    try {
      run_elastic_world(
          config, registry, plan, launch, [&](std::shared_ptr<ElasticWorld> elastic_world) {
            // What takes long comes first: a worker joining a running job enters it ready to
            // receive the state, so the others wait for it no longer than that.
            auto parts = build_trainer_components(config, registry, nullptr);
            const auto& o = elastic_world->options();
            const auto entered =
                elastic_world->enter(deadline_after(o.join_timeout + o.failure_timeout));
            if (entered.stopping) {
              throw TrainingError(
                  "elastic: the run stopped at generation " + std::to_string(entered.generation) +
                  " with fewer than min_workers = " + std::to_string(o.min_workers) +
                  " workers; this worker came too late to join it (the survivors' "
                  "checkpoint, if [train] checkpoint_dir is set, resumes with "
                  "--resume)");
            }
            if (entered.finished) {
              std::fprintf(stderr,
                           "elastic: this worker came after the run ended (generation %lld); "
                           "nothing left to train\n",
                           static_cast<long long>(entered.generation));
              return;
            }
            parts.world = entered.world;
            const bool replicated_state = parts.strategy_capabilities.replicated_state;
            Trainer trainer(options, std::move(parts));
            trainer.set_world_source(make_elastic_run(elastic_world, entered, replicated_state));
            try {
              report(trainer.run(resume));
            } catch (const Error&) {
              store_silence = elastic_world->store_silence();
              throw;
            }
          });
      return 0;
    } catch (const Error& e) {
      // Whatever the failure looked like from inside (a regroup that timed out, a world that
      // could not be written, a lease not granted or lost), a store that is gone, or was gone
      // long enough for the leases to end, is the cause to name.
      if (!store_silence && launcher_store_answers(registry, launch)) throw;
      const std::string cause =
          (store_silence ? "an outage longer than the workers' leases: " : "") +
          std::string(e.what());
      throw TrainingError(lost_store_message(launch.store_url, cause, options.checkpoint_dir));
    }
  }
  run_world(config, registry, plan, [&](std::shared_ptr<Communicator> world) {
    Trainer trainer(options, build_trainer_components(config, registry, std::move(world)));
    report(trainer.run(resume));
  });
  return 0;
}

}  // namespace tessera::cli
