#pragma once
// check_run: the mistakes no single option shows — a warm-up longer than the run, a model that
// does not fit the data set or the host, more ranks than the host can run — found before any
// rank starts, so that `tessera config check` and `tessera train` refuse the same configs with
// the same messages.

#include <cstddef>
#include <cstdint>
#include <string>

#include "tessera/config/config.hpp"
#include "tessera/registry/registry.hpp"

namespace tessera {

// What the run will do, as check_run computed it.
struct RunFigures {
  int world_size = 1;
  int data_parallel_size =
      1;  // replicas the batch is dealt over (Strategy::plan_data_parallel_size)
  std::size_t train_samples = 0;
  std::size_t steps_per_epoch = 0;
  std::int64_t total_steps = 0;  // epochs × steps_per_epoch, capped by max_steps
};

// Creates the run's transport, strategy, optimizer, model and dataset plugins once, without a
// rank or a communicator, so that their own checks run; then checks the values against each
// other (schedule against the run's steps, micro-batches against the batch, the data set's
// samples against the model's input and classes, checkpoint options against checkpoint_dir)
// and the world size against the host (check_host_can_run). Blocking (a dataset plugin may
// read its files). Throws ConfigError that names every value involved with where it came from
// (FILE:LINE, flag --section.key, environment TESSERA_X, or default) and the computed figures.
[[nodiscard]] RunFigures check_run(const Config& config, const PluginRegistry& registry);

// Refuses to start `ranks` ranks on this host when it cannot run them: more than
// kMaxRanksPerCore per online core, or more processes than RLIMIT_NPROC leaves when
// `processes` is true. `what` says where the number came from ("flag -n", "FILE:LINE: [runtime]
// world_size = 100000"). Throws ConfigError.
inline constexpr int kMaxRanksPerCore = 16;
void check_host_can_run(int ranks, bool processes, const std::string& what);

// "FILE:LINE", "flag --train.lr", "environment TESSERA_TRAIN_LR" or "default": where the value
// of section.key came from, for messages.
[[nodiscard]] std::string value_origin(const Config& config, const std::string& section,
                                       const std::string& key);

}  // namespace tessera
