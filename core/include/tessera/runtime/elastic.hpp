#pragma once
// Elastic training: ranks that die or stall are dropped and the survivors go on from memory,
// newcomers are admitted at step boundaries. `strategy = elastic` in a config (docs/training.md,
// "Elastic training"); a host that drives a Trainer itself gives it an ElasticWorld.
//
// The runtime, not a strategy plugin, does it: it needs the host's transport and store to form
// new worlds, and it wraps whichever strategy runs (the `inner` one), whose state it copies
// through Strategy::save and restores through Strategy::reconfigure.
#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "tessera/base/time.hpp"
#include "tessera/plugin/communicator.hpp"
#include "tessera/plugin/options.hpp"
#include "tessera/plugin/store.hpp"
#include "tessera/plugin/transport.hpp"
#include "tessera/runtime/config.hpp"

namespace tessera {

// The [strategy.elastic] section.
struct ElasticOptions {
  std::string inner = "ddp";  // the strategy that trains: ddp, zero1, zero2, zero3
  int min_workers = 1;        // fewer left: wait up to join_timeout for newcomers, then stop
  int max_workers = 1;        // newcomers beyond it wait for room
  // Copies of each rank's state kept on the next `replicas` ranks of the ring; 0 keeps none
  // (every failure then falls back to the newest checkpoint).
  int replicas = 1;
  // Steps between refreshes of those copies: a failure redoes at most this many steps.
  std::int64_t replica_every = 1;
  // A copy for a rank on the same host stays in shared memory that the rank opens (it outlives
  // its writer's process), instead of being sent: no bytes move. false sends every copy.
  bool share_copies_on_host = true;
  Duration heartbeat{500};         // how often each worker renews its lease
  Duration failure_timeout{5000};  // a worker silent this long is counted gone
  Duration join_timeout{60000};    // below min_workers, how long to wait for newcomers
  // Reads the section (its schema is Config's: elastic is part of the runtime).
  [[nodiscard]] static ElasticOptions from(const Options& section);
};

// Whether the config's [train] strategy is `elastic`; the strategy plugin that trains is then
// named by [strategy.elastic] inner.
[[nodiscard]] bool is_elastic(const Config& config);
// The section and key of the option that names the strategy plugin that trains:
// ("train", "strategy"), or ("strategy.elastic", "inner") for an elastic run.
[[nodiscard]] std::pair<std::string, std::string> trained_strategy_option(const Config& config);

// A world formed after a failure or to admit newcomers.
struct Regrouping {
  std::shared_ptr<Communicator> world;  // this worker's communicator in it; null when finished
  std::int64_t generation = 0;
  // For each rank of the new world, its rank in the previous one; -1 for a newcomer.
  std::vector<int> previous_rank;
  std::vector<std::string> left;    // worker ids of the previous world not in this one
  std::vector<std::string> joined;  // newcomers
  // The job's run ended (ElasticWorld::finish) before this worker got into a world.
  bool finished = false;
  // Fewer than min_workers were left when the wait for newcomers ended: the job stops at this
  // generation. `world` joins the survivors that were ready then, who save the state together
  // before they stop (Trainer: a checkpoint); null, with `finished`, for a worker left out of it
  // (a survivor that came too late, a newcomer).
  bool stopping = false;

  // Whether this worker enters a running job: a newcomer beside members of the previous world,
  // who hold the state it must receive (false in the job's first world).
  [[nodiscard]] bool joins_running_job() const;
};

// What the Trainer needs from the host to survive failures. One per worker.
class ElasticWorld {
 public:
  virtual ~ElasticWorld();
  // Blocks until this worker is in a world (the first one, or, for a worker started later, the
  // running job's next generation) and returns it; a finished one when the run ended first.
  // Throws Timeout at the deadline.
  [[nodiscard]] virtual Regrouping enter(Deadline deadline) = 0;
  // The current world failed (a collective threw): aborts it, forms the next generation with
  // whoever is alive and connects it. When fewer than min_workers are left at the deadline,
  // returns a `stopping` generation of the survivors instead, for them to save the state before
  // the job stops. Throws LeaseExpired when the others counted this worker gone; Timeout when
  // the new world cannot be connected in time.
  [[nodiscard]] virtual Regrouping regroup(const std::string& reason, Deadline deadline) = 0;
  // Collective over the current world, at a step boundary: whether newcomers wait to enter and
  // there is room for them (below max_workers). Every rank returns the same answer (rank 0
  // decides); false at once, with no communication, while the world is full.
  [[nodiscard]] virtual bool newcomers_waiting() = 0;
  // Called by every member once newcomers_waiting() said so: forms the next generation with
  // the members and the newcomers and connects it. Throws like regroup().
  [[nodiscard]] virtual Regrouping admit(Deadline deadline) = 0;
  // Collective over the current world (every rank calls it once per world): a second
  // communicator over the same ranks, on which the copies of the state travel while steps run
  // on the world, so that neither waits for the other. Aborted with the world; the world itself
  // when it has one rank. The same object on later calls in that world.
  [[nodiscard]] virtual std::shared_ptr<Communicator> side_channel() = 0;
  // A world of this worker alone, on the job's transport: a newcomer sets its strategy up on it
  // before it receives the running job's state.
  [[nodiscard]] virtual std::shared_ptr<Communicator> private_world() = 0;
  // The run ended in the current generation: newcomers waiting, and any that come later, are
  // told so (enter() returns a finished Regrouping) instead of starting a run of their own.
  virtual void finish() = 0;
  // What fails together with this worker (its node: the launcher that started it), so that the
  // copies of its state are kept on workers of other domains first. Empty (the default): a domain
  // of its own.
  [[nodiscard]] virtual std::string failure_domain() const;
  [[nodiscard]] virtual const ElasticOptions& options() const = 0;
};

// An ElasticWorld over a store shared by the job's workers (runtime.store, or the launcher's):
// membership under "membership/", each generation's transport rendezvous under "gen/<g>/".
// A background thread watches the members of the current world and aborts its communicator
// as soon as one's lease is gone, so that a rank blocked in a collective with a dead one wakes
// within about a heartbeat of the lease's end instead of at the transport's timeout.
[[nodiscard]] std::shared_ptr<ElasticWorld> make_elastic_world(std::shared_ptr<Transport> transport,
                                                               std::shared_ptr<Store> store,
                                                               ElasticOptions options,
                                                               std::string worker_id,
                                                               Duration timeout);

// The failure domain of a worker id (ElasticWorld::failure_domain): the node of a launcher's id,
// "<node>.w<local>[.r<restart>]" -> "<node>"; any other id is a domain of its own.
[[nodiscard]] std::string failure_domain_of(const std::string& worker_id);

}  // namespace tessera
