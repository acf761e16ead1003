#pragma once
// The [elastic] section: whether a run is elastic and how (docs/training.md, "Elastic
// training"). A host that runs elastic jobs passes elastic_sections() to Config::load.
#include <cstdint>
#include <string>

#include "tessera/base/time.hpp"
#include "tessera/config/config.hpp"
#include "tessera/plugin/options.hpp"
#include "tessera/registry/registry.hpp"
#include "tessera/runtime/run_check.hpp"

namespace tessera {

// The [elastic] section.
struct ElasticOptions {
  int min_workers = 1;  // fewer left: wait up to join_timeout for newcomers, then stop
  int max_workers = 1;  // newcomers beyond it wait for room
  // Copies of each rank's state kept on the next `copies` ranks of the ring; 0 keeps none
  // (every failure then falls back to the newest checkpoint).
  int copies = 1;
  // Steps between refreshes of those copies: a failure redoes at most this many steps.
  std::int64_t copy_every = 1;
  // A copy for a rank on the same host stays in shared memory that the rank opens (it outlives
  // its writer's process), instead of being sent: no bytes move. false sends every copy.
  bool share_copies_on_host = true;
  Duration heartbeat{500};         // how often each worker renews its lease
  Duration failure_timeout{5000};  // a worker silent this long is counted gone
  Duration join_timeout{60000};    // below min_workers, how long to wait for newcomers
  // Reads the [elastic] section. Throws ConfigError for options that cannot hold together.
  [[nodiscard]] static ElasticOptions from(const Options& section);
};

// The elastic layer's config sections, for Config::load: [elastic].
[[nodiscard]] const SectionSchemas& elastic_sections();

// Whether the config asks for an elastic run ([elastic] enabled = true). false for a config
// loaded without elastic_sections().
[[nodiscard]] bool is_elastic(const Config& config);

// What an elastic run needs beyond check_run(), whose figures it is given: its options hold
// together, the world it starts with fits between min_workers and max_workers, every rank is a
// data-parallel replica (the strategy can be resharded over a world of any size: ddp, zero1,
// zero2, zero3, not a tensor or pipeline split), and the state lives in host memory. Throws
// ConfigError naming the option, where it was set and what to do. Nothing for a run that is not
// elastic.
void check_elastic_run(const Config& config, const RunFigures& figures);
// The part of it every launched worker checks too (a joiner's launcher starts fewer workers than
// the job holds, so only the upper bound): `workers` started together fit under max_workers.
void check_elastic_world_size(const Config& config, int workers);

}  // namespace tessera
