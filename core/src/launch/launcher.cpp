#include "tessera/launcher.hpp"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <map>

#include "line_relay.hpp"
#include "signal_relay.hpp"
#include "tessera/error.hpp"
#include "tessera/launch_env.hpp"
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

void print(int fd, const std::string& line) {
  const auto text = "tessera launch: " + line + "\n";
  [[maybe_unused]] auto n = ::write(fd, text.data(), text.size());
}

std::shared_ptr<Store> serve_store(const LaunchOptions& options, const PluginRegistry& registry,
                                   const std::string& token) {
  const Options defaults = registry.default_options(PluginKind::store, "tcp");
  auto values = defaults.values();
  values["serve"] = "true";
  values["host"] = options.store_host;
  values["port"] = std::to_string(options.store_port);
  values["token"] = token;
  return registry.create<Store>("tcp", Options(defaults.section(), defaults.specs(), values));
}

std::vector<std::string> worker_environment(const std::map<std::string, std::string>& base,
                                            const LaunchOptions& options, int rank,
                                            const std::string& address, const std::string& token) {
  auto env = base;
  env["TESSERA_RANK"] = std::to_string(rank);
  env["TESSERA_WORLD_SIZE"] = std::to_string(options.processes);
  env["TESSERA_LOCAL_RANK"] = std::to_string(rank);
  env["TESSERA_LOCAL_WORLD_SIZE"] = std::to_string(options.processes);
  env["TESSERA_NODE_RANK"] = "0";
  env["TESSERA_STORE_ADDR"] = address;
  env["TESSERA_STORE_TOKEN"] = token;
  std::vector<std::string> out;
  out.reserve(env.size());
  for (const auto& [name, value] : env) out.push_back(name + "=" + value);
  return out;
}

// The running job: its workers, their output, and how it is going.
class Job {
 public:
  explicit Job(const LaunchOptions& options) : options_(options) {}

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

  void add(const WorkerProcess& worker) {
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
    if (options_.timeout) wake = std::min(wake, started + *options_.timeout);
    if (drain_until) wake = std::min(wake, *drain_until);
    const auto ms = std::chrono::ceil<std::chrono::milliseconds>(wake - Clock::now()).count();
    ::poll(fds.data(), fds.size(), static_cast<int>(std::max<std::int64_t>(ms, 0)));
  }

  void forward(int sig) {
    for (const auto& w : live_) ::kill(-w.pid, sig);
    if (!interrupted_) interrupted_ = sig;
  }

  void reap() {
    for (auto it = live_.begin(); it != live_.end();) {
      int status = 0;
      const pid_t pid = ::waitpid(it->pid, &status, WNOHANG);
      if (pid == 0) {
        ++it;
        continue;
      }
      const int rank = it->rank;
      it = live_.erase(it);
      if (pid < 0) status = 0xff00;  // not our child any more: count it as a failure, code 255
      const bool failed = !(WIFEXITED(status) && WEXITSTATUS(status) == 0);
      if (failed && result_.failure.empty()) {
        result_.failure = launch::describe_exit(rank, status);
        result_.exit_code = launch::shell_exit_code(status);
        if (result_.exit_code == 0) result_.exit_code = 1;
        stop_all();
      }
    }
  }

  void check_deadlines(Clock::time_point started) {
    const auto now = Clock::now();
    if (options_.timeout && result_.failure.empty() && now >= started + *options_.timeout &&
        !live_.empty()) {
      result_.failure =
          "the job ran past its timeout of " + std::to_string(options_.timeout->count()) + " ms";
      result_.exit_code = 124;
      stop_all();
    }
    if (kill_at_ && now >= *kill_at_) {
      for (const auto& w : live_) ::kill(-w.pid, SIGKILL);
      kill_at_.reset();
    }
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
  std::vector<WorkerProcess> live_;
  std::vector<LineRelay> relays_;
  LaunchResult result_;
  std::optional<Clock::time_point> kill_at_;
  std::optional<int> interrupted_;
  std::string stopped_note_;
};

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

  const auto token = random_store_token();
  const auto store = serve_store(options, registry, token);
  const auto address = store->address();

  launch::SignalRelay signals;
  Job job(options);
  for (int rank = 0; rank < options.processes; ++rank) {
    try {
      job.add(launch::spawn_worker(rank, program, options.command,
                                   worker_environment(base_env, options, rank, address, token)));
    } catch (const Error& e) {
      print(options.stderr_fd, e.what());
      return {127, e.what()};  // ~Job kills the workers already started
    }
  }
  return job.run(signals);
}

}  // namespace tessera
