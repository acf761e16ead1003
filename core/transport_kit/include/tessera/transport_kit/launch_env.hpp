#pragma once
// Where this process sits in its job, read from the environment a launcher left: `tessera
// launch` (TESSERA_*), OpenMPI's mpirun (OMPI_COMM_WORLD_*) or Slurm's srun (SLURM_*).

#include <map>
#include <string>

namespace tessera {

struct LaunchInfo {
  int rank = 0;
  int world_size = 1;
  int local_rank = 0;         // rank among the processes on this host
  int local_world_size = 1;   // processes on this host
  int node_rank = 0;          // index of this host among the job's hosts
  std::string store_address;  // "host:port" of the job's tcp store; empty if none was given
  std::string store_token;    // the job's store token; empty if none was given
  // The job's store as a URL (TESSERA_STORE_URL: tcp://, etcd://, file://; store_url.hpp),
  // which `tessera launch` gives its workers; empty if none was given.
  std::string store_url;
  std::string source;  // "tessera", "openmpi", "slurm", or "none" (a lone process: rank 0 of 1)
  // Elastic runs: this worker's id in the job (TESSERA_WORKER_ID; `tessera launch` gives
  // "n<node>.w<local rank>"); empty: "rank<rank>".
  std::string worker_id;
};

// Reads the variables of the first launcher found, in the order TESSERA_RANK, then
// OMPI_COMM_WORLD_RANK, then SLURM_PROCID; with none, a lone process (rank 0 of 1). Store
// address, token and URL always come from TESSERA_STORE_ADDR, TESSERA_STORE_TOKEN and
// TESSERA_STORE_URL (pass them through mpirun -x or srun --export). Throws ConfigError naming the
// variable when a value is not a number or the values disagree (rank >= world size, local rank >=
// local world size, ...).
[[nodiscard]] LaunchInfo launch_info_from_environment();

// The same, reading `environment` instead of the process's (tests, hosts that filter it).
[[nodiscard]] LaunchInfo launch_info_from_environment(
    const std::map<std::string, std::string>& environment);

// The process environment as a map (what the overload above is given by the first one).
[[nodiscard]] std::map<std::string, std::string> process_environment();

}  // namespace tessera
