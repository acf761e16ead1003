#include "worker_process.hpp"

#include <fcntl.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "tessera/base/error.hpp"

namespace tessera::launch {

namespace {

struct Pipe {
  int read = -1;
  int write = -1;
};

Pipe make_pipe() {
  int fds[2];
  if (::pipe2(fds, O_CLOEXEC) != 0)
    throw Error(std::string("launcher: pipe failed: ") + std::strerror(errno));
  return {fds[0], fds[1]};
}

bool is_executable_file(const std::string& path) {
  struct stat st {};
  return ::stat(path.c_str(), &st) == 0 && S_ISREG(st.st_mode) && ::access(path.c_str(), X_OK) == 0;
}

std::vector<char*> c_strings(const std::vector<std::string>& strings) {
  std::vector<char*> out;
  out.reserve(strings.size() + 1);
  for (const auto& s : strings) out.push_back(const_cast<char*>(s.c_str()));
  out.push_back(nullptr);
  return out;
}

// Runs in the child between fork and exec: async-signal-safe calls only.
[[noreturn]] void exec_child(const char* program, char* const* argv, char* const* envp,
                             pid_t launcher, Pipe out, Pipe err, Pipe report,
                             const cpu_set_t* cpus) {
  ::setpgid(0, 0);
  if (cpus != nullptr) ::sched_setaffinity(0, sizeof(cpu_set_t), cpus);
  ::prctl(PR_SET_PDEATHSIG, SIGKILL);
  if (::getppid() != launcher) ::_exit(127);  // the launcher died before prctl took effect
  ::dup2(out.write, STDOUT_FILENO);
  ::dup2(err.write, STDERR_FILENO);
  sigset_t none;
  sigemptyset(&none);
  ::sigprocmask(SIG_SETMASK, &none, nullptr);
  ::signal(SIGPIPE, SIG_DFL);  // the launcher ignores it; exec keeps an ignored disposition
  ::execve(program, argv, envp);
  const int err_no = errno;
  [[maybe_unused]] auto n = ::write(report.write, &err_no, sizeof err_no);
  ::_exit(127);
}

}  // namespace

std::string resolve_program(const std::string& name, const std::string& search_path) {
  if (name.empty()) throw ConfigError("launch: no program given");
  if (name.find('/') != std::string::npos) {
    if (!is_executable_file(name))
      throw ConfigError("launch: " + name + " is not an executable file");
    return name;
  }
  std::size_t pos = 0;
  while (pos <= search_path.size()) {
    auto colon = search_path.find(':', pos);
    if (colon == std::string::npos) colon = search_path.size();
    const auto dir = search_path.substr(pos, colon - pos);
    const auto candidate = (dir.empty() ? std::string(".") : dir) + "/" + name;
    if (is_executable_file(candidate)) return candidate;
    pos = colon + 1;
  }
  throw ConfigError("launch: program '" + name + "' not found in PATH");
}

WorkerProcess spawn_worker(int rank, const std::string& program,
                           const std::vector<std::string>& argv,
                           const std::vector<std::string>& environment, const cpu_set_t* cpus) {
  auto c_argv = c_strings(argv);
  auto c_env = c_strings(environment);
  const Pipe out = make_pipe();
  const Pipe err = make_pipe();
  const Pipe report = make_pipe();  // CLOEXEC: closes unread when exec succeeds
  const pid_t launcher = ::getpid();
  const pid_t pid = ::fork();
  if (pid < 0) {
    const auto message = std::string("launcher: fork failed: ") + std::strerror(errno);
    for (int fd : {out.read, out.write, err.read, err.write, report.read, report.write})
      ::close(fd);
    throw Error(message);
  }
  if (pid == 0)
    exec_child(program.c_str(), c_argv.data(), c_env.data(), launcher, out, err, report, cpus);

  ::setpgid(pid, pid);  // also here, so the group exists before the launcher signals it
  ::close(out.write);
  ::close(err.write);
  ::close(report.write);
  int exec_errno = 0;
  ssize_t n = 0;
  do {
    n = ::read(report.read, &exec_errno, sizeof exec_errno);
  } while (n < 0 && errno == EINTR);
  ::close(report.read);
  if (n == sizeof exec_errno) {
    ::close(out.read);
    ::close(err.read);
    int status = 0;
    ::waitpid(pid, &status, 0);
    throw Error("launch: cannot start " + program + ": " + std::strerror(exec_errno));
  }
  return {rank, pid, out.read, err.read};
}

std::vector<cpu_set_t> worker_cpu_sets(int processes, bool binding) {
  cpu_set_t allowed;
  CPU_ZERO(&allowed);
  if (!binding || processes < 2 || ::sched_getaffinity(0, sizeof allowed, &allowed) != 0) return {};
  std::vector<int> cpus;
  for (int cpu = 0; cpu < CPU_SETSIZE; ++cpu) {
    if (CPU_ISSET(cpu, &allowed)) cpus.push_back(cpu);
  }
  const auto n = static_cast<std::size_t>(processes);
  if (cpus.size() < n) return {};
  std::vector<cpu_set_t> sets(n);
  const std::size_t share = cpus.size() / n;
  for (std::size_t i = 0; i < n; ++i) {
    CPU_ZERO(&sets[i]);
    for (std::size_t j = i * share; j < (i + 1) * share; ++j) CPU_SET(cpus[j], &sets[i]);
  }
  return sets;
}

std::string describe_exit(int rank, int wait_status) {
  const auto who = "rank " + std::to_string(rank);
  if (WIFEXITED(wait_status))
    return who + " exited with code " + std::to_string(WEXITSTATUS(wait_status));
  if (WIFSIGNALED(wait_status)) {
    const int sig = WTERMSIG(wait_status);
    const char* abbrev = ::sigabbrev_np(sig);
    return who + " was killed by signal " + std::to_string(sig) +
           (abbrev != nullptr ? " (SIG" + std::string(abbrev) + ")" : std::string());
  }
  return who + " ended with wait status " + std::to_string(wait_status);
}

int shell_exit_code(int wait_status) noexcept {
  if (WIFEXITED(wait_status)) return WEXITSTATUS(wait_status);
  if (WIFSIGNALED(wait_status)) return 128 + WTERMSIG(wait_status);
  return 1;
}

}  // namespace tessera::launch
