#pragma once
// Elastic training on the trainer's world-change seam (runtime/world_source.hpp): ranks that die
// or stall are dropped and the survivors go on from memory, newcomers are admitted at step
// boundaries. `[elastic] enabled = true` in a config; a host that drives a Trainer itself gives
// it make_elastic_run(...).
#include <functional>
#include <memory>

#include "tessera/config/config.hpp"
#include "tessera/elastic/elastic_world.hpp"
#include "tessera/registry/registry.hpp"
#include "tessera/runtime/world.hpp"
#include "tessera/runtime/world_source.hpp"
#include "tessera/transport_kit/launch_env.hpp"

namespace tessera {

// The WorldSource of an elastic run (Trainer::set_world_source; docs/training.md, "Elastic
// training"): `entered` is the world this worker entered the job with (ElasticWorld::enter), the
// trainer's world. Every copy_every steps each rank saves the strategy into memory and copies
// it to the next `copies` ranks (none when `replicated_state`: the strategy declares
// TESSERA_REPLICATED_STATE); when a collective fails (a rank died, stalled or left:
// TransportError, Timeout), every survivor regroups into the next generation, rebuilds the whole
// state from what the survivors hold (or, when a rank's state and all its copies are gone, from
// the newest checkpoint, saying so) and goes on from the step the state is of. Newcomers are
// admitted at step boundaries inside an epoch and receive the state from the members; a worker
// that enters a running job (entered.joins_running_job()) sets its strategy up on a world of its
// own, then receives the state (--resume does not apply to it). Each change is in
// TrainResult::world_events and, from rank 0, on standard error. When fewer than min_workers are
// left after join_timeout, the survivors write their state, rebuilt as for a regroup, as a
// checkpoint into checkpoint_dir and the run throws TrainingError naming it and how to resume.
[[nodiscard]] std::shared_ptr<WorldSource> make_elastic_run(std::shared_ptr<ElasticWorld> elastic,
                                                            const Regrouping& entered,
                                                            bool replicated_state);

// An elastic run's rank: its ElasticWorld, not entered yet. The body prepares what takes long
// first (the data set, the model), then enters the job (ElasticWorld::enter), so that a worker
// joining a running one holds the others back only for the state it receives; make_elastic_run
// takes what enter() returned.
using ElasticRankBody = std::function<void(std::shared_ptr<ElasticWorld> elastic)>;

// run_world for an elastic run: each rank of this process gets an ElasticWorld ([elastic]
// options; the worker id is the launcher's TESSERA_WORKER_ID) over the plan's store (as
// run_world's), or for threads one in-memory store, and `body` enters and trains. Threads are not
// aborted when one fails: the others regroup without it. Blocks until every body has returned;
// rethrows the first failure only when no rank finished.
void run_elastic_world(const Config& config, const PluginRegistry& registry, const WorldPlan& plan,
                       const LaunchInfo& launch, const ElasticRankBody& body);

}  // namespace tessera
