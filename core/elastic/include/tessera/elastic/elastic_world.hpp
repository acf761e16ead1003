#pragma once
// An elastic job's world as one worker sees it: who is in each generation, the communicators
// formed for it, and what fails together (docs/training.md, "Elastic training").
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "tessera/base/time.hpp"
#include "tessera/elastic/elastic_options.hpp"
#include "tessera/plugin/communicator.hpp"
#include "tessera/plugin/store.hpp"
#include "tessera/plugin/transport.hpp"

namespace tessera {

// A world formed after a failure or to admit newcomers.
struct Regrouping {
  std::shared_ptr<Communicator> world;  // this worker's communicator in it; null when finished
  std::int64_t generation = 0;
  // For each rank of the new world, its rank in the previous one; -1 for a newcomer.
  std::vector<int> previous_rank;
  std::vector<std::string> members;  // worker ids, in rank order
  std::vector<std::string> left;     // worker ids of the previous world not in this one
  std::vector<std::string> joined;   // newcomers
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
  // How long the job's store left this worker's lease renewals unanswered, when that outlasted
  // the lease (failure_timeout): a run that then failed for a lost lease or the world it took
  // down lost it to the store's outage (Membership::store_silence). nullopt (the default) else.
  // Thread-safe.
  [[nodiscard]] virtual std::optional<Duration> store_silence() const;
  // Before this worker acts on a step as a member of the current world (its rank 0 writes the
  // step's record): throws LeaseExpired when the others counted it gone meanwhile (it was
  // stopped and woken after its lease ended), so that a worker no longer in the job writes
  // nothing into it. Not collective; free while the worker's lease is renewed (Membership::
  // confirm_lease). The default: nothing to confirm.
  virtual void confirm_membership();
  // For the members of the current generation when no world of theirs can be formed (its
  // transport refused it for lack of memory) but the job's store answers: round `round` of an
  // all-gather through the store. Each member posts `mine`; once every member of the
  // generation has posted or left (its lease ended), or at `deadline`, the first to see it fixes
  // who is in the round, and every caller returns the same values, by rank in the generation,
  // nullopt for those left out. Not collective over a communicator; rounds are told apart by
  // name, each used once per generation. Throws the store's errors, and InvalidArgument before
  // this worker entered.
  [[nodiscard]] virtual std::vector<std::optional<std::string>> gather_without_world(
      const std::string& round, const std::string& mine, Deadline deadline) = 0;
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
