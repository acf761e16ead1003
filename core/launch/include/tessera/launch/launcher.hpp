#pragma once
// The launcher behind `tessera launch`: serves the job's tcp store (or opens the job's etcd or
// file store), starts the workers of this host with their rank and store in the environment,
// relays their output line by line with a rank prefix, forwards SIGINT and SIGTERM, and stops
// every worker as soon as one fails. A job may span several hosts: one launcher per host,
// meeting in node 0's tcp store or in the etcd server or folder they all reach.

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "tessera/plugin/store.hpp"
#include "tessera/registry/registry.hpp"

namespace tessera {

// How workers are pinned to this host's CPUs (those the launcher may run on).
enum class CpuBinding : std::uint8_t {
  // Several workers and at least one CPU each: worker i gets the i-th of `processes` equal,
  // contiguous groups of CPUs (as mpirun does). Otherwise, as `none`.
  automatic,
  none,  // leave placement to the scheduler
};

struct LaunchOptions {
  int processes = 1;  // workers to start on this host
  CpuBinding binding = CpuBinding::automatic;
  std::vector<std::string> command;  // program (searched in PATH) and its arguments
  bool rank0_only_output = false;    // relay only rank 0's stdout (stderr of every rank is kept)
  bool prefix_stdout = true;  // "[rank R] " before each stdout line (off: machine-readable output)
  std::string store_host = "127.0.0.1";  // where the store server binds (node 0)
  int store_port = 0;                    // 0: a free port (one node only)
  int nodes = 1;                         // hosts in the job, one launcher on each
  int node_rank = 0;                     // this host's index; node 0 serves the store
  // Where the job's processes meet (store_url.hpp): "host:port" or "tcp://host:port", where
  // node 0 serves tessera's tcp store and everyone dials it; "etcd://host:port[,...]" or
  // "file:///path", where nothing is served and every process opens that store under the
  // job's own namespace (job_id). Required when nodes > 1 or join. Empty: a tcp store served
  // on store_host:store_port, its address handed to the workers.
  std::string store_url;
  // The job token the store admits. Empty: TESSERA_STORE_TOKEN from the environment, else (one
  // node only) a fresh random one. With several nodes every node must be given the same one.
  std::string store_token;
  // etcd and file stores: the job's namespace (etcd keys under tessera/<job_id>/, the folder
  // <path>/<job_id>), the same on every node. Empty: derived from the token
  // (job_id_from_token), so a job on several nodes needs either this or a shared token.
  std::string job_id;
  // The `timeout` option of the store the launcher itself opens: how long a request keeps
  // retrying a store that does not answer (a node 0 not up yet, an etcd down). None: the
  // plugin's default (tcp 300 s, etcd 30 s, file 300 s).
  std::optional<Duration> store_timeout;
  // Node 0: how long it keeps serving the store, after its own workers are done, for the other
  // nodes' workers to finish.
  Duration finish_wait{60000};
  std::optional<Duration> timeout;  // the whole job's deadline; none: no deadline
  Duration grace_period{3000};      // between SIGTERM and SIGKILL when stopping workers
  // Elastic jobs (strategy = elastic): a worker that fails no longer stops the others; the
  // launcher reports it on one line and removes its liveness key from the job's store at once,
  // so the survivors regroup without waiting for its lease to end. The job succeeds when a
  // worker finishes the run.
  bool elastic = false;
  // Elastic jobs: how many failed workers of this host the launcher replaces, in all. A
  // replacement runs the same command with a new worker id (n0.w1 -> n0.w1.r1) and enters the
  // running job as a newcomer at its next step boundary. None once a worker finished the run.
  int max_restarts = 0;
  // Elastic jobs: this host's workers join a job already running, whose store store_url names
  // (the token or job id as for several nodes): nothing is served, and their ids are
  // "<host>-<launcher pid>.w<local>".
  bool join = false;
  // Added to every worker's environment (e.g. TESSERA_ELASTIC_MIN_WORKERS).
  std::map<std::string, std::string> environment;
  int stdout_fd = 1;  // where relayed output and messages go
  int stderr_fd = 2;
};

struct LaunchResult {
  // 0 when every worker exited 0; otherwise the first failure's exit code, 128 + its signal
  // when it was killed, 124 when the job timed out, 127 when the program could not be started.
  int exit_code = 0;
  std::string failure;  // "rank 2 exited with code 3"; empty on success
};

// Runs this host's part of one job to its end. With several nodes, global rank = node_rank *
// processes + local rank, every node must start the same number of processes, and a failure on
// any node stops the workers of every node. The store plugin (tcp, etcd or file) is created
// through `registry`, which must have it loaded; the workers get TESSERA_STORE_URL naming the
// job's store (and TESSERA_STORE_ADDR for tcp). An etcd or file store's job namespace is removed
// when the job ends (by node 0, once every node reported its workers done or finish_wait
// passed). Installs handlers for SIGINT, SIGTERM, SIGCHLD and SIGPIPE for the duration, so only
// one launch may run in a process at a time. Throws ConfigError on bad options and Error when
// the store cannot be served or does not answer within its timeout; a failing worker is reported
// in the result instead.
[[nodiscard]] LaunchResult launch_workers(const LaunchOptions& options,
                                          const PluginRegistry& registry);

// 32 random bytes from /dev/urandom as 64 hex digits: a job's store token.
[[nodiscard]] std::string random_store_token();

}  // namespace tessera
