#pragma once
// Shell commands run in the background in their own process group, waited for with a deadline
// (a job still running then is killed, group and all), their output files read back, and
// their processes found by a variable in their environment.

#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <set>
#include <sstream>
#include <string>
#include <thread>

namespace tessera::test {

class ShellJob {
 public:
  explicit ShellJob(const std::string& command) {
    pid_ = ::fork();
    if (pid_ == 0) {
      ::setpgid(0, 0);
      ::execl("/bin/sh", "sh", "-c", command.c_str(), static_cast<char*>(nullptr));
      ::_exit(127);
    }
    if (pid_ > 0) ::setpgid(pid_, pid_);
  }
  ~ShellJob() {
    if (pid_ > 0) (void)wait(std::chrono::seconds(0));
  }
  ShellJob(const ShellJob&) = delete;
  ShellJob& operator=(const ShellJob&) = delete;

  // Sends `sig` to the job's process group (the shell and what it started in that group).
  void signal_group(int sig) const {
    if (pid_ > 0) ::kill(-pid_, sig);
  }

  // The exit code; -1 when killed by a signal, or killed here after `limit`.
  int wait(std::chrono::milliseconds limit) {
    if (pid_ <= 0) return exit_code_;
    const auto until = std::chrono::steady_clock::now() + limit;
    int status = 0;
    while (::waitpid(pid_, &status, WNOHANG) == 0) {
      if (std::chrono::steady_clock::now() >= until) {
        ::kill(-pid_, SIGKILL);
        ::waitpid(pid_, &status, 0);
        status = SIGKILL;  // reported as killed
        break;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
    pid_ = -1;
    exit_code_ = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
    return exit_code_;
  }

 private:
  pid_t pid_ = -1;
  int exit_code_ = -1;
};

inline std::string read_text(const std::filesystem::path& path) {
  std::ifstream in(path);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

inline bool contains(const std::string& text, const std::string& needle) {
  return text.find(needle) != std::string::npos;
}

// The pids of the processes whose environment holds every one of `variables` (NAME=value). A
// test tags its job with a variable of its own, so that it finds that job's processes and no
// other.
inline std::set<pid_t> processes_with(const std::set<std::string>& variables) {
  std::set<pid_t> found;
  for (const auto& entry : std::filesystem::directory_iterator("/proc")) {
    const auto name = entry.path().filename().string();
    if (name.find_first_not_of("0123456789") != std::string::npos) continue;
    std::ifstream in(entry.path() / "environ", std::ios::binary);
    const std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    std::stringstream vars(text);
    std::size_t matched = 0;
    for (std::string var; std::getline(vars, var, '\0');) matched += variables.count(var);
    if (matched == variables.size()) found.insert(static_cast<pid_t>(std::stol(name)));
  }
  return found;
}

// One of them, or -1 if none.
inline pid_t process_with(const std::set<std::string>& variables) {
  const auto found = processes_with(variables);
  return found.empty() ? -1 : *found.begin();
}

}  // namespace tessera::test
