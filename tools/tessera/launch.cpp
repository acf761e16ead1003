#include "launch.hpp"

#include <charconv>
#include <iostream>

#include "tessera/base/error.hpp"
#include "tessera/launch/launcher.hpp"
#include "tessera/plugin/options.hpp"
#include "tessera/registry/registry.hpp"
#include "tessera/runtime/run_check.hpp"
#include "tessera/runtime/store_url.hpp"
#include "usage_error.hpp"

namespace tessera::cli {

namespace {

constexpr const char* kUsage = R"(usage: tessera launch -n N [options] [--] PROGRAM [ARGS...]
       tessera launch --nnodes M --node-rank R --store URL -n N [options] [--] PROGRAM ...
       tessera launch --elastic [--min-workers A] [--max-workers B] [--max-restarts R] -n N ...
       tessera launch --elastic --join --store URL -n N [options] [--] PROGRAM ...

Starts N processes of PROGRAM on this host, serves the job's tcp store (or opens the etcd or
file store --store names), and gives each worker TESSERA_RANK, TESSERA_WORLD_SIZE,
TESSERA_LOCAL_RANK, TESSERA_LOCAL_WORLD_SIZE, TESSERA_NODE_RANK, TESSERA_NNODES,
TESSERA_STORE_URL, TESSERA_STORE_TOKEN (and TESSERA_STORE_ADDR for tcp). Exits 0 when every
worker exits 0; when one fails, stops the others and exits with its code (128 + signal if
killed). On several hosts, run one launcher per host: they meet in the store --store names
(node 0 serves a tcp one), and rank = R * N + local rank. Every node needs the same token in
TESSERA_STORE_TOKEN (or --store-token), or with etcd and file the same --job-id.

options:
  -n, --nproc N          number of worker processes (required)
  --rank0-only-output    relay only rank 0's stdout (every rank's stderr is still shown)
  --bind-to auto|none    auto (default): pin worker i to the i-th equal share of this host's
                         CPUs when there are at least as many CPUs as workers; none: don't pin
  --no-prefix            relay stdout lines without the "[rank R] " prefix (stderr keeps it)
  --nnodes M             hosts in the job, one launcher on each (default 1)
  --node-rank R          this host's index, 0..M-1; node 0 serves the store (default 0)
  --store URL            where the job meets (required with --nnodes > 1 and --join):
                         HOST:PORT or tcp://HOST:PORT: node 0 serves tessera's tcp store
                         there (binding HOST unless --store-host says else), every node
                         dials it; etcd://HOST:PORT[,HOST:PORT...][/PREFIX]: an etcd v3
                         server, keys under PREFIX (default tessera/)<job id>/;
                         file:///ABS/PATH: a folder every node sees, the job in PATH/<job id>
  --job-id ID            etcd and file: the job's namespace (letters, digits . _ -; default:
                         derived from the token, so every node given one token agrees)
  --store-timeout T      how long the launcher's store requests retry a store that does not
                         answer (default: the store's own, etcd 30s, tcp and file 300s)
  --store-token T        the job token (default: TESSERA_STORE_TOKEN; with one node and
                         neither, a random one). Prefer the variable: arguments are visible
                         to every user of the host in ps
  --store-host HOST      tcp: address the store server binds (default 127.0.0.1)
  --store-port PORT      tcp: port the store server binds (default 0: a free one)
  --elastic              an elastic job (every worker gets TESSERA_ELASTIC_ENABLED=true): a
                         failed worker no longer stops the others; the job succeeds when a
                         worker finishes the run, fails when every worker failed
  --min-workers A        elastic: [elastic] min_workers for every worker
  --max-workers B        elastic: [elastic] max_workers for every worker
  --max-restarts R       elastic: replace up to R failed workers of this host, in all; each
                         replacement (id n0.w1 -> n0.w1.r1) joins at the next step boundary
  --join                 elastic: start this host's workers into a job already running,
                         whose store --store names (same TESSERA_STORE_TOKEN or --job-id); they are
                         admitted at its next step boundary while it is below max_workers
  --timeout T            stop the job after T (e.g. 90s, 2h; default: no limit); exit 124
  --grace T              wait T between SIGTERM and SIGKILL when stopping workers (default 3s)
  -h, --help             this text
)";

// Every count of launch has a least sensible value (a process, a node, rank 0, no restart):
// one below it is refused here, as the flag, before anything is checked against the host.
int parse_count(const std::string& flag, const std::string& text, int minimum) {
  int value = 0;
  const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), value);
  if (text.empty() || ec != std::errc() || end != text.data() + text.size())
    throw UsageError("launch: " + flag + " expects an integer, not '" + text + "'");
  if (value < minimum)
    throw UsageError("launch: " + flag + " must be at least " + std::to_string(minimum) + ", not " +
                     text);
  return value;
}

LaunchOptions parse(const std::vector<std::string>& args, const PluginRegistry& registry,
                    bool& help) {
  LaunchOptions options;
  bool have_n = false;
  bool have_bind_host = false;
  bool have_bind_port = false;
  std::size_t i = 0;
  const auto value_of = [&](const std::string& flag) -> std::string {
    if (i + 1 >= args.size()) throw UsageError("launch: " + flag + " needs a value");
    return args[++i];
  };
  for (; i < args.size(); ++i) {
    const auto& a = args[i];
    if (a == "--") {
      ++i;
      break;
    }
    if (a.empty() || a[0] != '-') break;  // the program starts here
    if (a == "-h" || a == "--help") {
      help = true;
      return options;
    } else if (a == "-n" || a == "--nproc") {
      options.processes = parse_count(a, value_of(a), 1);
      have_n = true;
    } else if (a.starts_with("-n") && a.size() > 2 && a[2] != '-') {
      options.processes = parse_count("-n", a.substr(a[2] == '=' ? 3 : 2), 1);
      have_n = true;
    } else if (a == "--rank0-only-output") {
      options.rank0_only_output = true;
    } else if (a == "--bind-to") {
      const auto how = value_of(a);
      if (how == "none") {
        options.binding = CpuBinding::none;
      } else if (how == "auto") {
        options.binding = CpuBinding::automatic;
      } else {
        throw UsageError("launch: --bind-to takes auto or none, not '" + how + "'");
      }
    } else if (a == "--no-prefix") {
      options.prefix_stdout = false;
    } else if (a == "--nnodes") {
      options.nodes = parse_count(a, value_of(a), 1);
    } else if (a == "--node-rank") {
      options.node_rank = parse_count(a, value_of(a), 0);
    } else if (a == "--store") {
      options.store_url = value_of(a);
    } else if (a == "--job-id") {
      options.job_id = value_of(a);
    } else if (a == "--store-timeout") {
      options.store_timeout = parse_duration(value_of(a));
    } else if (a == "--elastic") {
      options.elastic = true;
    } else if (a == "--join") {
      options.join = true;
    } else if (a == "--max-restarts") {
      options.max_restarts = parse_count(a, value_of(a), 0);
    } else if (a == "--min-workers" || a == "--max-workers") {
      const auto count = parse_count(a, value_of(a), a == "--min-workers" ? 1 : 0);
      const auto key = a == "--min-workers" ? "MIN_WORKERS" : "MAX_WORKERS";
      options.environment[std::string("TESSERA_ELASTIC_") + key] = std::to_string(count);
    } else if (a == "--store-token") {
      options.store_token = value_of(a);
    } else if (a == "--store-host") {
      options.store_host = value_of(a);
      have_bind_host = true;
    } else if (a == "--store-port") {
      options.store_port = parse_count(a, value_of(a), 0);
      have_bind_port = true;
    } else if (a == "--timeout") {
      options.timeout = parse_duration(value_of(a));
    } else if (a == "--grace") {
      options.grace_period = parse_duration(value_of(a));
    } else {
      throw UsageError("launch: unknown option '" + a + "' (see tessera launch --help)");
    }
  }
  if (!have_n) throw UsageError("launch: -n N is required (see tessera launch --help)");
  if (!options.environment.empty() && !options.elastic)
    throw UsageError("launch: --min-workers and --max-workers are for elastic jobs: add --elastic");
  // The workers of an elastic job train elastically whatever their config says.
  if (options.elastic) options.environment["TESSERA_ELASTIC_ENABLED"] = "true";
  if (!options.store_url.empty()) {
    StoreUrl url;
    try {
      url = parse_store_url(registry, options.store_url, "launch: --store");
    } catch (const ConfigError& e) {
      throw UsageError(e.what());
    }
    if (url.scheme != kLauncherStoreScheme && (have_bind_host || have_bind_port))
      throw UsageError(
          "launch: --store-host and --store-port bind the tcp store the launcher "
          "serves; with --store " +
          options.store_url + " nothing is served");
    if (url.scheme == kLauncherStoreScheme && !have_bind_host) {
      // Bind exactly the address the other nodes dial: nothing else on the host is exposed.
      options.store_host = url.plugin_options().at("host");
    }
  }
  if (!options.job_id.empty()) {
    if (options.store_url.empty() || options.store_url.find("://") == std::string::npos ||
        options.store_url.starts_with("tcp://"))
      throw UsageError(
          "launch: --job-id names the job's keys in an etcd or file store: add "
          "--store etcd://HOST:PORT or --store file:///PATH (a tcp store serves "
          "one job and needs no id)");
    try {
      check_job_id(options.job_id, "launch: --job-id");
    } catch (const ConfigError& e) {
      throw UsageError(e.what());
    }
  }
  options.command.assign(args.begin() + static_cast<std::ptrdiff_t>(i), args.end());
  if (options.command.empty()) throw UsageError("launch: no program given after --");
  return options;
}

}  // namespace

int run_launch(const std::vector<std::string>& args) {
  bool help = false;
  // Before the arguments: the store plugins read the --store URL.
  PluginRegistry registry;
  registry.scan(PluginRegistry::default_search_path());
  const auto options = parse(args, registry, help);
  if (help) {
    std::cout << kUsage;
    return 0;
  }
  // Refused before the store starts or a worker forks: fork would otherwise fail part-way.
  check_host_can_run(options.processes, true, "launch: -n " + std::to_string(options.processes));
  return launch_workers(options, registry).exit_code;
}

}  // namespace tessera::cli
