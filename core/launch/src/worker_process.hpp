#pragma once
// Starting one worker process and describing how it ended.

#include <sched.h>
#include <sys/types.h>

#include <string>
#include <vector>

namespace tessera::launch {

struct WorkerProcess {
  int rank = 0;
  pid_t pid = -1;
  int stdout_fd = -1;  // read ends of the worker's stdout and stderr; the caller closes them
  int stderr_fd = -1;
};

// The program's absolute path: `name` itself when it contains a '/', else the first
// executable match in `search_path` (PATH's syntax). Throws ConfigError when there is none.
[[nodiscard]] std::string resolve_program(const std::string& name, const std::string& search_path);

// Forks and execs `program` with `argv` and `environment` ("NAME=value" entries). The worker
// leads its own process group (so stopping it reaches its children) and is killed if the
// launcher dies. Returns once exec has succeeded; throws Error with exec's reason otherwise.
// `cpus`, when given, is the set the worker is pinned to before exec.
[[nodiscard]] WorkerProcess spawn_worker(int rank, const std::string& program,
                                         const std::vector<std::string>& argv,
                                         const std::vector<std::string>& environment,
                                         const cpu_set_t* cpus = nullptr);

// The CPU sets `processes` workers are pinned to under `binding`: one equal, contiguous share
// of the launcher's own CPUs each, or none (an empty result) when binding is off or there
// are more workers than CPUs. Two workers spinning on one core wait a scheduler tick for each
// other; pinned, they never share one.
[[nodiscard]] std::vector<cpu_set_t> worker_cpu_sets(int processes, bool binding);

// "rank 2 exited with code 3" or "rank 1 was killed by signal 9 (SIGKILL)".
[[nodiscard]] std::string describe_exit(int rank, int wait_status);

// The exit code a shell would report for `wait_status`: the code, or 128 + the signal.
[[nodiscard]] int shell_exit_code(int wait_status) noexcept;

}  // namespace tessera::launch
