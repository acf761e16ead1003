#include "config/core_schema.hpp"

#include "tessera/config/config.hpp"

namespace tessera {

namespace detail {

std::optional<PluginKind> selected_plugin_kind(std::string_view section,
                                               std::string_view key) noexcept {
  if (section == "runtime") {
    if (key == "transport") return PluginKind::transport;
    if (key == "store") return PluginKind::store;
  } else if (section == "train") {
    if (key == "strategy") return PluginKind::strategy;
    if (key == "model") return PluginKind::model;
    if (key == "optimizer") return PluginKind::optimizer;
    if (key == "dataset") return PluginKind::dataset;
  }
  return std::nullopt;
}

}  // namespace detail

const SectionSchemas& Config::core_schema() {
  static const SectionSchemas schema = {
      {"plugins",
       {
           {"path",
            OptionType::string,
            "",
            "colon-separated folders of plugins, each of which must exist; their plugins win "
            "over TESSERA_PLUGIN_PATH's and the installed ones; relative entries in a file are "
            "relative to that file",
            {}},
       }},
      {"runtime",
       {
           {"transport",
            OptionType::string,
            "local",
            "transport plugin that connects the ranks",
            {}},
           {"store", OptionType::string, "memory", "rendezvous store plugin", {}},
           {"device",
            OptionType::string,
            "cpu",
            "where the strategy keeps parameters, gradients and optimizer state and the model "
            "computes: cpu, or cuda (each rank's GPU, the one its transport moves: nccl)",
            {"cpu", "cuda"}},
           {"world_size", OptionType::integer, "1", "number of ranks", {}, "1", "65536"},
           {"timeout",
            OptionType::duration,
            "300s",
            "deadline of every blocking call (rendezvous, collectives)",
            {},
            "1ms",
            std::nullopt},
       }},
      // The trainer's options (docs/training.md); the plugins it picks have their own sections.
      {"train",
       {
           {"strategy", OptionType::string, "ddp", "parallelism strategy plugin", {}},
           {"model", OptionType::string, "mlp", "model plugin", {}},
           {"optimizer", OptionType::string, "sgd", "optimizer plugin", {}},
           {"dataset", OptionType::string, "fashion-mnist", "dataset plugin", {}},
           {"epochs", OptionType::integer, "1", "passes over the training set", {}, "1", "1000000"},
           {"max_steps",
            OptionType::integer,
            "0",
            "stop after this many optimizer steps in total (0: run every epoch)",
            {},
            "0",
            std::nullopt},
           {"batch_size",
            OptionType::integer,
            "64",
            "samples per rank per step",
            {},
            "1",
            "16777216"},
           {"micro_batches",
            OptionType::integer,
            "1",
            "gradient accumulation: each rank's batch runs as this many micro-batches, "
            "communicating after the last",
            {},
            "1",
            "65536"},
           {"eval_batch_size",
            OptionType::integer,
            "1000",
            "samples per rank per evaluation batch",
            {},
            "1",
            "16777216"},
           {"eval_samples",
            OptionType::integer,
            "0",
            "evaluate on this many test samples, spread evenly over the test split (0: all)",
            {},
            "0",
            "2147483647"},
           {"lr", OptionType::floating, "0.01", "base learning rate", {}, "0", std::nullopt},
           {"schedule",
            OptionType::string,
            "constant",
            "learning-rate schedule",
            {"constant", "step", "cosine"}},
           {"warmup_steps",
            OptionType::integer,
            "0",
            "cosine: linear warm-up steps",
            {},
            "0",
            std::nullopt},
           {"step_size",
            OptionType::integer,
            "1000",
            "step: steps between decays",
            {},
            "1",
            std::nullopt},
           {"gamma", OptionType::floating, "0.1", "step: decay factor", {}, "0", std::nullopt},
           {"min_lr",
            OptionType::floating,
            "0",
            "cosine: final learning rate",
            {},
            "0",
            std::nullopt},
           {"max_grad_norm",
            OptionType::floating,
            "0",
            "clip the global gradient L2 norm to this value (0: no clipping)",
            {},
            "0",
            std::nullopt},
           {"seed",
            OptionType::integer,
            "0",
            "seeds parameter initialisation and every epoch's data order",
            {},
            "0",
            std::nullopt},
           {"eval_every",
            OptionType::integer,
            "0",
            "evaluate on the test set every this many steps (0: after each epoch)",
            {},
            "0",
            std::nullopt},
           {"checkpoint_dir",
            OptionType::string,
            "",
            "checkpoint folder (empty: no checkpoints)",
            {}},
           {"checkpoint_every",
            OptionType::integer,
            "0",
            "write a checkpoint every this many steps (0: only at the end)",
            {},
            "0",
            std::nullopt},
           {"checkpoint_keep",
            OptionType::integer,
            "2",
            "newest checkpoints of this run kept (older runs' are never removed)",
            {},
            "1",
            "1000000"},
           {"on_nonfinite",
            OptionType::string,
            "error",
            "a step whose loss or gradient norm is NaN or infinite: error stops the run naming "
            "the step; skip makes no update for it and counts it",
            {"error", "skip"}},
           {"metrics_file",
            OptionType::string,
            "",
            "JSON Lines file of per-step metrics, appended to (empty: none)",
            {}},
           {"progress",
            OptionType::string,
            "auto",
            "rank 0's progress on stderr: auto (a bar on a terminal, lines otherwise), bar, "
            "lines, off",
            {"auto", "bar", "lines", "off"}},
           {"trace_file",
            OptionType::string,
            "",
            "Chrome trace-event JSON of the run, one file per rank: FILE with .rankR before "
            "its extension (docs/tracing.md; empty: no tracing)",
            {}},
           {"trace_steps",
            OptionType::string,
            "1:100",
            "steps recorded when tracing, FIRST:LAST or FIRST: (to the end), besides setup, "
            "resume and the final evaluation and checkpoint",
            {}},
           {"trace_max_events",
            OptionType::integer,
            "1000000",
            "events kept per rank when tracing (about 112 bytes each); later ones are dropped "
            "and counted",
            {},
            "1000",
            std::nullopt},
       }},
  };
  return schema;
}

}  // namespace tessera
