#pragma once
// Shell commands run in the background in their own process group, waited for with a deadline
// (a job still running then is killed, group and all), and their output files read back.

#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <iterator>
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

}  // namespace tessera::test
