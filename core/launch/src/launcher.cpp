#include "tessera/launch/launcher.hpp"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <functional>
#include <map>
#include <thread>

#include "job_claim.hpp"
#include "line_relay.hpp"
#include "node_group.hpp"
#include "signal_relay.hpp"
#include "tessera/base/error.hpp"
#include "tessera/elastic/membership.hpp"
#include "tessera/runtime/store_url.hpp"
#include "tessera/transport_kit/launch_env.hpp"
#include "worker_process.hpp"

namespace tessera {

namespace {

using Clock = std::chrono::steady_clock;
using launch::LineRelay;
using launch::WorkerProcess;

// SIGCHLD wakes the loop, but a bounded poll also covers a signal lost to a full pipe.
constexpr auto kPollInterval = std::chrono::milliseconds(200);
// After the last worker exits, how long output from its leftover children is still relayed.
constexpr auto kDrainAfterExit = std::chrono::milliseconds(1000);
// How long node 0 of an elastic job waits for a node none of whose workers is alive before it
// counts the node gone: its launcher, if alive, reports within a poll of its workers' exit.
constexpr auto kDeadNodeGrace = std::chrono::milliseconds(3000);

void print(int fd, const std::string& line) {
  const auto text = "tessera launch: " + line + "\n";
  [[maybe_unused]] auto n = ::write(fd, text.data(), text.size());
}

// The other nodes' launchers check the store this often while their workers run; a store that
// does not answer within it counts as node 0 gone.
constexpr auto kStorePollTimeout = std::chrono::milliseconds(3000);
// Shorter tokens are refused for a store that other hosts can reach.
constexpr std::size_t kMinSharedTokenLength = 16;

// The store plugin `plugin` with its defaults, `values` over them, and `timeout` if given.
std::shared_ptr<Store> create_store(const PluginRegistry& registry, const std::string& plugin,
                                    const std::map<std::string, std::string>& values,
                                    std::optional<Duration> timeout) {
  const Options defaults = registry.default_options(PluginKind::store, plugin);
  auto all = defaults.values();
  for (const auto& [key, value] : values) all[key] = value;
  if (timeout) all["timeout"] = std::to_string(timeout->count()) + "ms";
  return registry.create<Store>(plugin, Options(defaults.section(), defaults.specs(), all));
}

// Polls the job's store until no worker holds a live lease (every one revoked it, or was marked
// gone, or its lease ended), for at most `bound`; SIGINT or SIGTERM ends the wait, as does a
// store that stops answering (nobody is left to serve then).
void wait_for_members_to_leave(Store& store, launch::SignalRelay& signals, Duration bound,
                               int stderr_fd) {
  const auto deadline = Clock::now() + bound;
  for (;;) {
    try {
      if (!any_worker_alive(store, "")) return;
    } catch (const std::exception&) {
      return;
    }
    while (const auto sig = signals.next())
      if (*sig == SIGINT || *sig == SIGTERM) return;
    if (Clock::now() >= deadline) {
      print(stderr_fd,
            "elastic: stopping the job's store " +
                std::to_string(std::chrono::duration_cast<std::chrono::seconds>(bound).count()) +
                " s after this node's workers finished, while workers that other "
                "launchers started (--join) still hold a lease; they lose the store");
      return;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
}

std::shared_ptr<Store> tcp_store(const PluginRegistry& registry, bool serve,
                                 const std::string& host, int port, const std::string& token,
                                 std::optional<Duration> timeout) {
  return create_store(registry, "tcp",
                      {{"serve", serve ? "true" : "false"},
                       {"host", host},
                       {"port", std::to_string(port)},
                       {"token", token}},
                      timeout);
}

// Opens the job's store that runs without the launchers (etcd, file, a third party's) and reads
// from it once, so that a store that does not answer fails here, naming --store, rather than in
// every worker.
std::shared_ptr<Store> external_store(const PluginRegistry& registry, const LaunchOptions& options,
                                      const StoreUrl& job, std::optional<Duration> timeout) {
  const auto lead = "launch: --store " + options.store_url + ": ";
  try {
    auto store = create_store(registry, job.store, job.plugin_options(), timeout);
    (void)store->check("tessera.launch/nnodes");
    return store;
  } catch (const ConfigError& e) {
    throw ConfigError(lead + e.what());
  } catch (const PluginError& e) {
    throw PluginError(lead + "no " + job.store + " store plugin to open it (" + e.what() + ")");
  } catch (const std::exception& e) {
    throw Error(lead + "the job's " + job.store + " store at " + job.text() + " does not answer (" +
                e.what() + "); start it there or point --store at one " +
                "that runs (--store-timeout bounds the wait)");
  }
}

// Removes the job's namespace from a store that outlives the launchers once the job is over, as
// its plugin knows how: what is left would only stop a later job with the same id (the same
// token) from claiming its node ranks.
void forget_job(Store& store, const StoreUrl& job, int stderr_fd);

// "tcp://host:port", an IPv6 host in brackets.
std::string tcp_url(const std::string& address) {
  const auto colon = address.rfind(':');
  auto host = address.substr(0, colon);
  if (host.find(':') != std::string::npos && host.front() != '[') host = "[" + host + "]";
  return "tcp://" + host + address.substr(colon);
}

std::pair<std::string, int> split_store_address(const std::string& address) {
  const auto colon = address.rfind(':');
  int port = 0;
  if (colon != std::string::npos && colon > 0) {
    try {
      std::size_t used = 0;
      port = std::stoi(address.substr(colon + 1), &used);
      if (used != address.size() - colon - 1) port = 0;
    } catch (const std::exception&) {
      port = 0;
    }
  }
  if (port < 1 || port > 65535)
    throw ConfigError("launch: store address '" + address +
                      "' is not HOST:PORT with a port 1-65535");
  auto host = address.substr(0, colon);
  if (host.size() > 2 && host.front() == '[' && host.back() == ']')
    host = host.substr(1, host.size() - 2);
  return {host, port};
}

void check_nodes(const LaunchOptions& options) {
  if (options.nodes < 1)
    throw ConfigError("launch: --nnodes must be at least 1, not " + std::to_string(options.nodes));
  if (options.node_rank < 0 || options.node_rank >= options.nodes)
    throw ConfigError("launch: --node-rank " + std::to_string(options.node_rank) +
                      " is not in 0.." + std::to_string(options.nodes - 1));
  if (options.join && (options.nodes > 1 || options.store_url.empty() || !options.elastic))
    throw ConfigError(
        "launch: --join starts this host's workers into an elastic job already running: it "
        "needs --elastic and --store HOST:PORT (the job's store, or etcd://... or file://...), "
        "and takes no --nnodes");
  if (options.max_restarts < 0)
    throw ConfigError("launch: --max-restarts must be at least 0, not " +
                      std::to_string(options.max_restarts));
  if (options.max_restarts > 0 && !options.elastic)
    throw ConfigError(
        "launch: --max-restarts replaces failed workers of an elastic job: add "
        "--elastic (and train with strategy = elastic)");
  if (options.nodes > 1 && options.store_url.empty())
    throw ConfigError(
        "launch: a job on several nodes needs --store: HOST:PORT where node 0 serves the store "
        "and every node dials it, or etcd://HOST:PORT or file:///SHARED/PATH that every node "
        "reaches");
  if (!options.job_id.empty()) check_job_id(options.job_id, "launch: --job-id");
}

// A multi-node job cannot draw its token on one node alone: the others must present it too. An
// etcd or file store admits anyone who reaches it, so there the token only names the job, which
// --job-id may do instead.
std::string job_token(const LaunchOptions& options, const std::map<std::string, std::string>& env,
                      bool external) {
  std::string token = options.store_token;
  if (token.empty() && env.contains("TESSERA_STORE_TOKEN")) token = env.at("TESSERA_STORE_TOKEN");
  const bool named_by_id = external && !options.job_id.empty();
  if (token.empty()) {
    if ((options.nodes > 1 || options.join) && !named_by_id)
      throw ConfigError(
          "launch: a job on several nodes (or joined by --join) needs the same store token on "
          "every node: set "
          "TESSERA_STORE_TOKEN (or --store-token) to one secret, e.g. `openssl rand -hex 32`" +
          std::string(external ? ", or give every node the same --job-id" : ""));
    return random_store_token();
  }
  if (options.nodes > 1 && !named_by_id && token.size() < kMinSharedTokenLength)
    throw ConfigError("launch: the store token is " + std::to_string(token.size()) +
                      " characters; a store other hosts can reach needs at least " +
                      std::to_string(kMinSharedTokenLength) + " (e.g. `openssl rand -hex 32`)");
  return token;
}

// A worker's id in an elastic job (TESSERA_WORKER_ID): stable across generations, unique in the
// job. "n<node>.w<local>", "<host>-<pid>.w<local>" for a host that joins a running job, and
// ".r<k>" after it for the k-th replacement of a failed worker.
std::string worker_id(const LaunchOptions& options, int local_rank, int restart) {
  std::string id;
  if (options.join) {
    char host[256] = {};
    if (::gethostname(host, sizeof host - 1) != 0 || host[0] == '\0') std::strcpy(host, "host");
    // Ids allow letters, digits and . _ - : @ only.
    for (char* c = host; *c != '\0'; ++c) {
      if (std::isalnum(static_cast<unsigned char>(*c)) == 0 && *c != '-' && *c != '.') *c = '-';
    }
    id = std::string(host) + "-" + std::to_string(::getpid());
  } else {
    id = "n" + std::to_string(options.node_rank);
  }
  id += ".w" + std::to_string(local_rank);
  if (restart > 0) id += ".r" + std::to_string(restart);
  return id;
}

// `store`: TESSERA_STORE_URL, and TESSERA_STORE_ADDR for a tcp store (an empty value unsets it).
std::vector<std::string> worker_environment(const std::map<std::string, std::string>& base,
                                            const LaunchOptions& options, int local_rank,
                                            const std::map<std::string, std::string>& store,
                                            const std::string& token, const std::string& id) {
  auto env = base;
  for (const auto& [name, value] : options.environment) env[name] = value;
  for (const auto& [name, value] : store) {
    if (value.empty()) {
      env.erase(name);
    } else {
      env[name] = value;
    }
  }
  env["TESSERA_RANK"] = std::to_string(options.node_rank * options.processes + local_rank);
  env["TESSERA_WORLD_SIZE"] = std::to_string(options.nodes * options.processes);
  env["TESSERA_LOCAL_RANK"] = std::to_string(local_rank);
  env["TESSERA_LOCAL_WORLD_SIZE"] = std::to_string(options.processes);
  env["TESSERA_NODE_RANK"] = std::to_string(options.node_rank);
  env["TESSERA_NNODES"] = std::to_string(options.nodes);
  env["TESSERA_STORE_TOKEN"] = token;
  env["TESSERA_WORKER_ID"] = id;
  std::vector<std::string> out;
  out.reserve(env.size());
  for (const auto& [name, value] : env) out.push_back(name + "=" + value);
  return out;
}

// The running job: its workers, their output, and how it is going.
class Job {
 public:
  // Starts the worker of local rank `local` with worker id `id`.
  using Spawn = std::function<WorkerProcess(int local, const std::string& id)>;

  // `store`: the job's store as the elastic bookkeeping uses it (may be null), `store_url` its
  // URL for messages.
  Job(const LaunchOptions& options, launch::NodeGroup* group, std::shared_ptr<Store> store,
      std::string store_url, Spawn spawn)
      : options_(options),
        group_(group),
        store_(std::move(store)),
        store_url_(std::move(store_url)),
        spawn_(std::move(spawn)),
        restarts_left_(options.max_restarts),
        restarts_of_(static_cast<std::size_t>(options.processes), 0) {}

  ~Job() {
    // Reached with live workers only when starting them failed half way: leave no orphans.
    for (const auto& w : live_) ::kill(-w.pid, SIGKILL);
    for (const auto& w : live_) {
      int status = 0;
      ::waitpid(w.pid, &status, 0);
    }
  }
  Job(const Job&) = delete;
  Job& operator=(const Job&) = delete;

  void start(int local) {
    const auto id = worker_id(options_, local, restarts_of_[static_cast<std::size_t>(local)]);
    const auto worker = spawn_(local, id);
    ids_[worker.pid] = id;
    live_.push_back(worker);
    const bool shown = !options_.rank0_only_output || worker.rank == 0;
    relays_.emplace_back(worker.rank, worker.stdout_fd, shown ? options_.stdout_fd : -1,
                         options_.prefix_stdout);
    relays_.emplace_back(worker.rank, worker.stderr_fd, options_.stderr_fd);
  }

  LaunchResult run(launch::SignalRelay& signals) {
    const auto started = Clock::now();
    std::optional<Clock::time_point> drain_until;
    while (!live_.empty() || (drain_until && Clock::now() < *drain_until && any_relay_open())) {
      wait_for_events(signals, started, drain_until);
      while (const auto sig = signals.next()) {
        if (*sig == SIGINT || *sig == SIGTERM) forward(*sig);
      }
      for (auto& r : relays_) r.pump();
      reap();
      stop_workers_left_behind();
      check_other_nodes();
      check_deadlines(started);
      if (live_.empty() && !drain_until) drain_until = Clock::now() + kDrainAfterExit;
    }
    for (auto& r : relays_) r.close();
    if (!result_.failure.empty()) {
      const auto note = interrupted_ ? " after the launcher forwarded SIG" +
                                           std::string(::sigabbrev_np(*interrupted_))
                                     : std::string();
      print(options_.stderr_fd, result_.failure + note + stopped_note_);
    }
    return result_;
  }

  // Whether SIGINT or SIGTERM reached the launcher while the workers ran.
  [[nodiscard]] bool interrupted() const noexcept { return interrupted_.has_value(); }

 private:
  bool any_relay_open() const {
    return std::any_of(relays_.begin(), relays_.end(), [](const LineRelay& r) { return r.open(); });
  }

  void wait_for_events(launch::SignalRelay& signals, Clock::time_point started,
                       std::optional<Clock::time_point> drain_until) {
    std::vector<pollfd> fds{{signals.fd(), POLLIN, 0}};
    for (const auto& r : relays_)
      if (r.open()) fds.push_back({r.source(), POLLIN, 0});
    auto wake = Clock::now() + kPollInterval;
    if (kill_at_) wake = std::min(wake, *kill_at_);
    for (const auto& [pid, when] : kill_one_at_) wake = std::min(wake, when);
    if (options_.timeout) wake = std::min(wake, started + *options_.timeout);
    if (drain_until) wake = std::min(wake, *drain_until);
    const auto ms = std::chrono::ceil<std::chrono::milliseconds>(wake - Clock::now()).count();
    ::poll(fds.data(), fds.size(), static_cast<int>(std::max<std::int64_t>(ms, 0)));
  }

  // A stopped worker keeps a SIGTERM pending until it is continued, so it is continued too; one
  // that ignores or outlives the signal is killed after the grace period, as when the launcher
  // stops the job itself. This bounds the launcher's exit after SIGINT/SIGTERM by the grace
  // period plus kDrainAfterExit.
  void forward(int sig) {
    for (const auto& w : live_) {
      ::kill(-w.pid, sig);
      ::kill(-w.pid, SIGCONT);
    }
    if (!interrupted_) interrupted_ = sig;
    if (!kill_at_ && !live_.empty()) kill_at_ = Clock::now() + options_.grace_period;
  }

  struct Exit {
    int rank;
    int status;
    std::string id;  // the worker id
    // Stopped by this launcher as left behind (stop_workers_left_behind): its lease is gone
    // already, so there is no liveness key to remove.
    bool left_behind = false;
  };

  void reap() {
    std::vector<Exit> failed;
    for (auto it = live_.begin(); it != live_.end();) {
      int status = 0;
      const pid_t pid = ::waitpid(it->pid, &status, WNOHANG);
      if (pid == 0) {
        ++it;
        continue;
      }
      const int rank = it->rank;
      const auto id = ids_[it->pid];
      ids_.erase(it->pid);
      const bool left_behind = kill_one_at_.erase(it->pid) > 0;
      lease_gone_since_.erase(it->pid);
      it = live_.erase(it);
      if (pid < 0) status = 0xff00;  // not our child any more: count it as a failure, code 255
      if (WIFEXITED(status) && WEXITSTATUS(status) == 0) {
        ++finished_;
      } else {
        failed.push_back({rank, status, id, left_behind});
      }
    }
    if (options_.elastic) {
      elastic_exits(failed);
      return;
    }
    if (failed.empty() || !result_.failure.empty()) return;
    // The first failure is the one to report; later ones are its consequences. Exits found in
    // one pass, though, came within one wake-up of each other and their order is lost. Then a
    // rank that exited with an error code, having run its own error path and printed why, is
    // the cause; a rank killed by a signal beside it is a survivor that fell over on its way
    // out (a crash in its error handling, or the peer it waited on gone).
    const auto by_code = std::find_if(failed.begin(), failed.end(),
                                      [](const Exit& e) { return WIFEXITED(e.status); });
    const Exit& first = by_code != failed.end() ? *by_code : failed.front();
    result_.failure = launch::describe_exit(first.rank, first.status);
    result_.exit_code = launch::shell_exit_code(first.status);
    if (result_.exit_code == 0) result_.exit_code = 1;
    if (group_ != nullptr) group_->report_failure(result_.exit_code, result_.failure);
    stop_all();
  }

  void check_other_nodes() {
    if (group_ == nullptr || !result_.failure.empty() || live_.empty()) return;
    if (const auto failure = group_->remote_failure()) {
      result_.failure = failure->what;
      result_.exit_code = failure->exit_code == 0 ? 1 : failure->exit_code;
      stop_all();
    }
  }

  void check_deadlines(Clock::time_point started) {
    const auto now = Clock::now();
    if (options_.timeout && result_.failure.empty() && now >= started + *options_.timeout &&
        !live_.empty()) {
      result_.failure =
          "the job ran past its timeout of " + std::to_string(options_.timeout->count()) + " ms";
      result_.exit_code = 124;
      if (group_ != nullptr) group_->report_failure(result_.exit_code, result_.failure);
      stop_all();
    }
    if (kill_at_ && now >= *kill_at_) {
      for (const auto& w : live_) ::kill(-w.pid, SIGKILL);
      kill_at_.reset();
    }
    for (auto it = kill_one_at_.begin(); it != kill_one_at_.end();) {
      if (now < it->second) {
        ++it;
        continue;
      }
      ::kill(-it->first, SIGKILL);
      // Kept until the worker is reaped, so that stop_workers_left_behind does not stop it again.
      it->second = Clock::time_point::max();
      ++it;
    }
  }

  // A worker whose lease ended while it was stopped (SIGSTOP) or hung was left out of the worlds
  // the others formed, and nothing tells it when they finish the run: it would keep the job
  // alive forever. Once a worker finished the run, a live worker whose lease has been gone for
  // the grace period is stopped: SIGTERM (and SIGCONT, which a stopped one needs to act on it),
  // SIGKILL after another grace period. The grace period spares a member that left the
  // membership at the end of the run and is still writing its last files.
  void stop_workers_left_behind() {
    if (!options_.elastic || finished_ == 0 || !store_) return;
    const auto now = Clock::now();
    if (now < next_lease_check_) return;
    next_lease_check_ = now + kPollInterval;
    for (const auto& w : live_) {
      if (kill_one_at_.contains(w.pid)) continue;
      const auto& id = ids_[w.pid];
      // The run has finished: a store that no longer answers (the job's launcher served it and
      // is gone) holds no lease for anyone, so a worker still entering then is left behind too.
      bool alive = false;
      try {
        alive = worker_alive(*store_, id);
      } catch (const std::exception&) {  // NOLINT(bugprone-empty-catch): counted gone
      }
      if (alive) {
        lease_gone_since_.erase(w.pid);
        continue;
      }
      const auto since = lease_gone_since_.try_emplace(w.pid, now).first->second;
      if (now - since < options_.grace_period) continue;
      print(options_.stderr_fd, "elastic: worker " + id + " (rank " + std::to_string(w.rank) +
                                    ") lost its lease and the run finished without it; "
                                    "stopping it");
      ::kill(-w.pid, SIGTERM);
      ::kill(-w.pid, SIGCONT);
      kill_one_at_[w.pid] = now + options_.grace_period;
    }
  }

  // An elastic job goes on without the failed workers: each is reported, and its liveness key
  // in the store goes at once (it would end with its lease anyway, failure_timeout later). While
  // restarts are left and no worker finished the run, a replacement enters as a newcomer.
  void elastic_exits(const std::vector<Exit>& failed) {
    for (const auto& exit : failed) {
      const auto why = launch::describe_exit(exit.rank, exit.status);
      try {
        if (store_ && result_.failure.empty() && !exit.left_behind)
          mark_worker_gone(*store_, exit.id);
      } catch (const Error& e) {
        // The membership lives in the store: without it nobody can regroup, admit or finish,
        // and a worker that finished would make the job look like a success.
        result_.failure = why + " and the job's store " + store_url_ + " does not answer (" +
                          e.what() + "); an elastic job cannot go on without it";
        result_.exit_code = launch::shell_exit_code(exit.status);
        if (result_.exit_code == 0) result_.exit_code = 1;
        stop_all();
        continue;
      }
      if (!result_.failure.empty()) continue;  // the job is being stopped: nobody goes on
      last_failure_ = exit;
      const int local = exit.rank - options_.node_rank * options_.processes;
      if (restarts_left_ > 0 && finished_ == 0 && result_.failure.empty() && !interrupted_) {
        --restarts_left_;
        ++restarts_of_[static_cast<std::size_t>(local)];
        const auto id = worker_id(options_, local, restarts_of_[static_cast<std::size_t>(local)]);
        print(options_.stderr_fd, "elastic: worker " + exit.id + " left: " + why +
                                      "; the others go on; starting " + id + " to join them (" +
                                      std::to_string(restarts_left_) + " restart(s) left)");
        try {
          start(local);
        } catch (const Error& e) {
          print(options_.stderr_fd, "elastic: cannot start " + id + ": " + e.what());
        }
      } else {
        print(options_.stderr_fd, "elastic: worker " + exit.id + " left: " + why + what_follows());
      }
    }
    // Every worker gone and none finished the run: the job failed, as the last one did.
    if (live_.empty() && finished_ == 0 && result_.failure.empty() && !failed.empty()) {
      result_.failure = "every worker of the elastic job failed; the last: " +
                        launch::describe_exit(last_failure_.rank, last_failure_.status);
      result_.exit_code = launch::shell_exit_code(last_failure_.status);
      if (result_.exit_code == 0) result_.exit_code = 1;
    }
  }

  // What a worker's departure (not replaced) leaves the job doing, for the line that reports
  // it: the others go on only when some are still running and nothing is ending the job.
  [[nodiscard]] std::string what_follows() const {
    if (interrupted_) {
      return std::string("; the job is being stopped (the launcher forwarded SIG") +
             ::sigabbrev_np(*interrupted_) + ")";
    }
    if (finished_ > 0) return "; the run had finished without it";
    if (live_.empty()) return "; no worker of this launcher is left";
    return "; the others go on";
  }

  // SIGTERM now, SIGKILL after the grace period to whoever is still there.
  void stop_all() {
    if (live_.empty() || kill_at_) return;
    stopped_note_ = "; stopping the other " + std::to_string(live_.size()) + " rank" +
                    (live_.size() == 1 ? "" : "s");
    for (const auto& w : live_) ::kill(-w.pid, SIGTERM);
    kill_at_ = Clock::now() + options_.grace_period;
  }

  const LaunchOptions& options_;
  launch::NodeGroup* group_;
  std::vector<WorkerProcess> live_;
  std::vector<LineRelay> relays_;
  LaunchResult result_;
  std::optional<Clock::time_point> kill_at_;
  // Elastic: workers left behind by the run (stop_workers_left_behind), and since when each
  // live worker's lease has been seen gone.
  std::map<pid_t, Clock::time_point> kill_one_at_;
  std::map<pid_t, Clock::time_point> lease_gone_since_;
  Clock::time_point next_lease_check_{};
  std::shared_ptr<Store> store_;  // the job's, for elastic exits; may be null
  std::string store_url_;
  Spawn spawn_;
  std::map<pid_t, std::string> ids_;  // worker ids of the live workers
  int finished_ = 0;                  // workers that exited 0
  int restarts_left_;
  std::vector<int> restarts_of_;  // replacements started, per local rank
  Exit last_failure_{0, 0, {}};
  std::optional<int> interrupted_;
  std::string stopped_note_;
};

}  // namespace

namespace {

void forget_job(Store& store, const StoreUrl& job, int stderr_fd) {
  try {
    job.forget_job(store);
  } catch (const std::exception& e) {
    print(stderr_fd, "could not remove the job's keys from " + job.text() + " (" + e.what() +
                         "); a later job with the same id may find them");
  }
}

}  // namespace

std::string random_store_token() {
  unsigned char bytes[32];
  const int fd = ::open("/dev/urandom", O_RDONLY | O_CLOEXEC);
  if (fd < 0) throw Error(std::string("cannot open /dev/urandom: ") + std::strerror(errno));
  std::size_t got = 0;
  while (got < sizeof bytes) {
    const ssize_t n = ::read(fd, bytes + got, sizeof bytes - got);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      ::close(fd);
      throw Error("cannot read /dev/urandom");
    }
    got += static_cast<std::size_t>(n);
  }
  ::close(fd);
  static constexpr char kHex[] = "0123456789abcdef";
  std::string token;
  for (const unsigned char b : bytes) {
    token.push_back(kHex[b >> 4]);
    token.push_back(kHex[b & 15]);
  }
  return token;
}

LaunchResult launch_workers(const LaunchOptions& options, const PluginRegistry& registry) {
  if (options.processes < 1)
    throw ConfigError("launch: -n must be at least 1, not " + std::to_string(options.processes));
  if (options.command.empty()) throw ConfigError("launch: no program given after --");
  const auto base_env = process_environment();
  const auto path = base_env.contains("PATH") ? base_env.at("PATH") : std::string("/usr/bin:/bin");
  const auto program = launch::resolve_program(options.command.front(), path);

  check_nodes(options);
  std::optional<StoreUrl> where;
  if (!options.store_url.empty())
    where = parse_store_url(registry, options.store_url, "launch: --store");
  const bool external = where && where->scheme != kLauncherStoreScheme;
  const auto token = job_token(options, base_env, external);

  // tcp: node 0 serves, the other nodes only dial. Any other store (etcd, file): every node
  // opens the job's namespace of a store that runs without the launchers. All keep their store
  // to the end.
  std::shared_ptr<Store> store;
  std::optional<StoreUrl> job_store;
  std::string address = where && !external ? where->location : std::string();
  // An etcd or file store outlives its jobs: two jobs given one id would meet in one namespace
  // and break each other, so each launcher claims its node of the job before a worker starts.
  std::optional<launch::JobClaim> claim;
  // The job's etcd or file store as the launcher uses it while the job runs and at its end: a
  // client whose requests give up after kStorePollTimeout, so that a store gone holds neither
  // the launcher's loop (and its signal handling) nor its exit longer.
  std::shared_ptr<Store> quick_store;
  if (external) {
    const auto id = options.job_id.empty() ? job_id_from_token(token) : options.job_id;
    job_store = where->for_job(id);
    store = external_store(registry, options, *job_store, options.store_timeout);
    quick_store =
        create_store(registry, job_store->store, job_store->plugin_options(), kStorePollTimeout);
    if (!options.join) claim.emplace(quick_store, options.node_rank, id, job_store->text());
  } else if (options.join) {
    // The running job's store: dialled, not served.
    const auto [host, port] = split_store_address(address);
    store = tcp_store(registry, false, host, port, token,
                      options.store_timeout.value_or(kStorePollTimeout));
  } else if (options.node_rank == 0) {
    int port = options.store_port;
    if (port == 0 && !address.empty()) port = split_store_address(address).second;
    store = tcp_store(registry, true, options.store_host, port, token, options.store_timeout);
    if (address.empty()) address = store->address();
  }
  std::optional<launch::NodeGroup> group;
  if (options.nodes > 1) {
    std::shared_ptr<Store> poll;
    std::shared_ptr<Store> join = store;
    std::string lost;
    if (external) {
      poll = external_store(registry, options, *job_store, kStorePollTimeout);
      lost = job_store->store + " store " + job_store->text() + " does not answer";
    } else {
      const auto [host, port] = split_store_address(address);
      poll = tcp_store(registry, false, host, port, token, kStorePollTimeout);
      // Node 0 may come up later than this one: joining waits as long as the workers would.
      if (!join)
        join = tcp_store(registry, false, host, port, token,
                         options.store_timeout ? options.store_timeout : options.timeout);
      lost = "is node 0 gone?";
    }
    try {
      group.emplace(join, std::move(poll), options.nodes, options.node_rank, options.processes,
                    lost);
    } catch (const ConfigError&) {
      throw;
    } catch (const std::exception& e) {
      // Rethrown with what the launcher was doing and where.
      throw Error("launch: node " + std::to_string(options.node_rank) +
                  " cannot join the job's store at " + (job_store ? job_store->text() : address) +
                  ": " + e.what());
    }
    if (!store) store = std::move(join);
  }
  std::map<std::string, std::string> store_env;
  if (external) {
    store_env = {{"TESSERA_STORE_URL", job_store->text()}, {"TESSERA_STORE_ADDR", ""}};
  } else {
    store_env = {{"TESSERA_STORE_URL", tcp_url(address)}, {"TESSERA_STORE_ADDR", address}};
  }

  // An elastic job's launcher marks failed workers gone and looks at liveness keys while the
  // job runs, from the loop that also handles signals: its own client gives up after
  // kStorePollTimeout, so that a store that does not answer holds the loop no longer, and that
  // loss ends the job.
  std::shared_ptr<Store> membership_store;
  if (options.elastic) {
    if (external) {
      membership_store = quick_store;
    } else {
      const auto [host, port] = split_store_address(address);
      membership_store = tcp_store(registry, false, host, port, token, kStorePollTimeout);
    }
  }

  launch::SignalRelay signals;
  LaunchResult result;
  bool interrupted = false;
  {
    const auto cpu_sets =
        launch::worker_cpu_sets(options.processes, options.binding == CpuBinding::automatic);
    const auto spawn = [&](int local, const std::string& id) {
      const auto r = static_cast<std::size_t>(local);
      return launch::spawn_worker(
          options.node_rank * options.processes + local, program, options.command,
          worker_environment(base_env, options, local, store_env, token, id),
          cpu_sets.empty() ? nullptr : &cpu_sets[r]);
    };
    Job job(options, group ? &*group : nullptr, membership_store, store_env.at("TESSERA_STORE_URL"),
            spawn);
    for (int rank = 0; rank < options.processes; ++rank) {
      try {
        job.start(rank);
      } catch (const Error& e) {
        print(options.stderr_fd, e.what());
        if (group) group->report_failure(127, e.what());
        return {127, e.what()};  // ~Job kills the workers already started
      }
    }
    result = job.run(signals);
    interrupted = job.interrupted();
  }
  if (group) {
    group->report_finished();
    if (options.node_rank == 0) {
      // An elastic job went on without a node whose workers all died with it (a dead host
      // reports nothing): once none of its workers has been alive for a few seconds, nobody
      // waits for it.
      std::map<int, std::chrono::steady_clock::time_point> no_worker_since;
      const auto dead = [&](int node) {
        const auto now = std::chrono::steady_clock::now();
        bool alive = true;
        try {
          alive = any_worker_alive(*store, "n" + std::to_string(node) + ".w");
        } catch (const std::exception&) {  // NOLINT(bugprone-empty-catch): counted alive
        }
        if (alive) {
          no_worker_since.erase(node);
          return false;
        }
        const auto since = no_worker_since.try_emplace(node, now).first->second;
        return now - since >= kDeadNodeGrace;
      };
      bool nodes_dead = false;
      const auto missing = group->wait_for_others(options.finish_wait, [&](const auto& nodes) {
        if (interrupted) return true;  // the signal ended the job: it ends the wait too
        while (const auto sig = signals.next())
          if (*sig == SIGINT || *sig == SIGTERM) return true;
        nodes_dead = options.elastic && std::ranges::all_of(nodes, dead);
        return nodes_dead;
      });
      if (!missing.empty() && nodes_dead) {
        print(options.stderr_fd, "elastic: node(s) " + missing +
                                     " left the job: none of their workers is alive; not "
                                     "waiting for their launchers");
      } else if (!missing.empty())
        print(options.stderr_fd, (external ? "removing the job's keys while node(s) "
                                           : "stopping the store while node(s) ") +
                                     missing + " have not reported their workers finished");
    }
  }
  // An elastic job's store outlives its members: a worker that a `--join` launcher started is
  // no worker of this node's, and may still be leaving (revoking its lease) when this node's
  // are done. A tcp store served here and gone then would hold its exit for its client's
  // retries (the store's `timeout`), and an etcd job's keys removed under it would fail it.
  if (options.elastic && options.node_rank == 0 && !options.join && !interrupted &&
      membership_store)
    wait_for_members_to_leave(*membership_store, signals, options.finish_wait, options.stderr_fd);
  if (external && options.node_rank == 0 && !options.join)
    forget_job(*quick_store, *job_store, options.stderr_fd);
  return result;
}

}  // namespace tessera
