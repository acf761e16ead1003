#include "tessera/transport_kit/launch_env.hpp"

#include <charconv>
#include <optional>
#include <vector>

#include "tessera/base/error.hpp"

extern char** environ;  // NOLINT: POSIX declares it nowhere else

namespace tessera {

namespace {

using Environment = std::map<std::string, std::string>;

std::optional<std::string> lookup(const Environment& env, const std::string& name) {
  const auto found = env.find(name);
  if (found == env.end()) return std::nullopt;
  return found->second;
}

int parse_int(const std::string& name, const std::string& text) {
  int value = 0;
  const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), value);
  if (text.empty() || ec != std::errc() || end != text.data() + text.size() || value < 0)
    throw ConfigError("environment " + name + "='" + text + "': not a non-negative integer");
  return value;
}

int required_int(const Environment& env, const std::string& name, const std::string& because) {
  const auto text = lookup(env, name);
  if (!text) throw ConfigError("environment " + name + " is not set, but " + because + " is");
  return parse_int(name, *text);
}

std::optional<int> optional_int(const Environment& env, const std::string& name) {
  const auto text = lookup(env, name);
  if (!text) return std::nullopt;
  return parse_int(name, *text);
}

// Slurm's compressed per-node task counts, e.g. "2(x3),1" = 2,2,2,1. Returns the entry of
// node `node`, or nullopt when the list does not reach it.
std::optional<int> slurm_tasks_on_node(const std::string& name, const std::string& text, int node) {
  std::size_t pos = 0;
  int index = 0;
  while (pos < text.size()) {
    auto comma = text.find(',', pos);
    if (comma == std::string::npos) comma = text.size();
    const auto item = text.substr(pos, comma - pos);
    int repeat = 1;
    auto count_text = item;
    if (const auto paren = item.find("(x"); paren != std::string::npos) {
      if (item.back() != ')')
        throw ConfigError("environment " + name + "='" + text + "': malformed task list");
      repeat = parse_int(name, item.substr(paren + 2, item.size() - paren - 3));
      count_text = item.substr(0, paren);
    }
    const int count = parse_int(name, count_text);
    if (node < index + repeat) return count;
    index += repeat;
    pos = comma + 1;
  }
  return std::nullopt;
}

void check_consistent(const LaunchInfo& info, const std::string& vars) {
  const auto fail = [&](const std::string& what) {
    throw ConfigError("environment (" + info.source + ": " + vars + "): " + what);
  };
  if (info.world_size < 1) fail("world size " + std::to_string(info.world_size) + " is below 1");
  if (info.rank >= info.world_size)
    fail("rank " + std::to_string(info.rank) + " is not below world size " +
         std::to_string(info.world_size));
  if (info.local_world_size < 1 || info.local_world_size > info.world_size)
    fail("local world size " + std::to_string(info.local_world_size) + " is not in 1.." +
         std::to_string(info.world_size));
  if (info.local_rank >= info.local_world_size)
    fail("local rank " + std::to_string(info.local_rank) + " is not below local world size " +
         std::to_string(info.local_world_size));
}

LaunchInfo from_tessera(const Environment& env) {
  LaunchInfo info;
  info.source = "tessera";
  const std::string because = "TESSERA_RANK";
  info.rank = required_int(env, "TESSERA_RANK", because);
  info.world_size = required_int(env, "TESSERA_WORLD_SIZE", because);
  info.local_rank = optional_int(env, "TESSERA_LOCAL_RANK").value_or(info.rank);
  info.local_world_size = optional_int(env, "TESSERA_LOCAL_WORLD_SIZE").value_or(info.world_size);
  info.node_rank = optional_int(env, "TESSERA_NODE_RANK").value_or(0);
  check_consistent(info,
                   "TESSERA_RANK, TESSERA_WORLD_SIZE, TESSERA_LOCAL_RANK, "
                   "TESSERA_LOCAL_WORLD_SIZE");
  return info;
}

LaunchInfo from_openmpi(const Environment& env) {
  LaunchInfo info;
  info.source = "openmpi";
  const std::string because = "OMPI_COMM_WORLD_RANK";
  info.rank = required_int(env, "OMPI_COMM_WORLD_RANK", because);
  info.world_size = required_int(env, "OMPI_COMM_WORLD_SIZE", because);
  info.local_rank = optional_int(env, "OMPI_COMM_WORLD_LOCAL_RANK").value_or(info.rank);
  info.local_world_size = optional_int(env, "OMPI_COMM_WORLD_LOCAL_SIZE").value_or(info.world_size);
  check_consistent(info,
                   "OMPI_COMM_WORLD_RANK, OMPI_COMM_WORLD_SIZE, "
                   "OMPI_COMM_WORLD_LOCAL_RANK, OMPI_COMM_WORLD_LOCAL_SIZE");
  // OpenMPI names no node index. Its default mapping fills each host in turn with the same
  // number of processes, under which this is exact; TESSERA_NODE_RANK overrides it.
  info.node_rank = optional_int(env, "TESSERA_NODE_RANK")
                       .value_or((info.rank - info.local_rank) / info.local_world_size);
  return info;
}

LaunchInfo from_slurm(const Environment& env) {
  LaunchInfo info;
  info.source = "slurm";
  const std::string because = "SLURM_PROCID";
  info.rank = required_int(env, "SLURM_PROCID", because);
  info.world_size = lookup(env, "SLURM_NTASKS") ? required_int(env, "SLURM_NTASKS", because)
                                                : required_int(env, "SLURM_NPROCS", because);
  info.local_rank = optional_int(env, "SLURM_LOCALID").value_or(0);
  info.node_rank = optional_int(env, "SLURM_NODEID").value_or(0);
  std::optional<int> local_size;
  for (const char* name : {"SLURM_STEP_TASKS_PER_NODE", "SLURM_TASKS_PER_NODE"}) {
    if (const auto text = lookup(env, name)) {
      local_size = slurm_tasks_on_node(name, *text, info.node_rank);
      if (!local_size)
        throw ConfigError(std::string("environment ") + name + "='" + *text +
                          "' lists no tasks for SLURM_NODEID=" + std::to_string(info.node_rank));
      break;
    }
  }
  if (!local_size) {
    if (optional_int(env, "SLURM_NNODES").value_or(1) != 1)
      throw ConfigError(
          "environment: Slurm set no SLURM_TASKS_PER_NODE on a multi-node job, so "
          "the local world size is unknown");
    local_size = info.world_size;
  }
  info.local_world_size = *local_size;
  check_consistent(info, "SLURM_PROCID, SLURM_NTASKS, SLURM_LOCALID, SLURM_TASKS_PER_NODE");
  return info;
}

}  // namespace

LaunchInfo launch_info_from_environment(const Environment& environment) {
  LaunchInfo info;
  if (environment.contains("TESSERA_RANK")) {
    info = from_tessera(environment);
  } else if (environment.contains("OMPI_COMM_WORLD_RANK")) {
    info = from_openmpi(environment);
  } else if (environment.contains("SLURM_PROCID")) {
    info = from_slurm(environment);
  } else {
    info.source = "none";
  }
  info.store_address = lookup(environment, "TESSERA_STORE_ADDR").value_or("");
  info.store_token = lookup(environment, "TESSERA_STORE_TOKEN").value_or("");
  info.store_url = lookup(environment, "TESSERA_STORE_URL").value_or("");
  info.worker_id = lookup(environment, "TESSERA_WORKER_ID").value_or("");
  return info;
}

LaunchInfo launch_info_from_environment() {
  return launch_info_from_environment(process_environment());
}

std::map<std::string, std::string> process_environment() {
  std::map<std::string, std::string> env;
  for (char** entry = environ; entry != nullptr && *entry != nullptr; ++entry) {
    const std::string text(*entry);
    const auto eq = text.find('=');
    if (eq != std::string::npos) env.emplace(text.substr(0, eq), text.substr(eq + 1));
  }
  return env;
}

}  // namespace tessera
