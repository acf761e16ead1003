#pragma once
// A real etcd server for tests: started from Debian's etcd-server package (tools/dev/
// install-deps.sh installs it) on free ports in a temporary folder, stopped and its folder
// removed when the object dies. The server dies with the test process even when that crashes
// (PR_SET_PDEATHSIG), so a failing test leaves nothing running.
//
// Started with a 50 ms heartbeat and a 500 ms election timeout, so that its shortest lease is
// 1 s (etcd's minimum is 1.5 election timeouts, rounded up to a second) and a single member
// elects itself within a second.

#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <sstream>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

namespace tessera::store_test {

class EtcdServer {
 public:
  // extra_flags: appended to etcd's command line (a later flag wins over the defaults here).
  // Throws std::runtime_error saying what to do when etcd is not installed or does not start.
  explicit EtcdServer(std::vector<std::string> extra_flags = {})
      : extra_flags_(std::move(extra_flags)) {
    binary_ = find_binary();
    folder_ = std::filesystem::temp_directory_path() /
              ("tessera_etcd_" + std::to_string(::getpid()) + "_" + std::to_string(counter()++));
    std::filesystem::remove_all(folder_);
    std::filesystem::create_directories(folder_);
    // A free port may be taken by another process before etcd binds it: try new ones.
    for (int attempt = 1;; ++attempt) {
      client_port_ = free_port();
      peer_port_ = free_port();
      try {
        start();
        return;
      } catch (const std::runtime_error&) {
        if (attempt == 3) throw;
        std::filesystem::remove_all(folder_ / "data");
      }
    }
  }
  ~EtcdServer() {
    if (::getpid() != owner_) return;
    kill_now();
    std::error_code ignored;
    std::filesystem::remove_all(folder_, ignored);
  }
  EtcdServer(const EtcdServer&) = delete;
  EtcdServer& operator=(const EtcdServer&) = delete;

  // "127.0.0.1:<port>": the value of the store's `endpoints` option.
  [[nodiscard]] std::string endpoint() const { return "127.0.0.1:" + std::to_string(client_port_); }
  [[nodiscard]] pid_t pid() const { return pid_; }

  // SIGKILL, and reap: the server is gone, its port refuses connections.
  void kill_now() {
    // Only the process that started the server stops it: a forked test child that exits
    // normally must not take the server from its parent.
    if (pid_ <= 0 || ::getpid() != owner_) return;
    ::kill(pid_, SIGCONT);
    ::kill(pid_, SIGKILL);
    int status = 0;
    ::waitpid(pid_, &status, 0);
    pid_ = -1;
  }
  // Starts the server again on the same ports and data folder, after kill_now().
  void restart() {
    kill_now();
    start();
  }
  // Stops etcd (SIGSTOP) and returns once the kernel shows it stopped (at most 2 s), so that a
  // test's clock starts after the stop took effect, not while etcd still answers.
  void pause() const {
    ::kill(pid_, SIGSTOP);
    for (int i = 0; i < 200 && process_state() != 'T'; ++i)
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  void resume() const { ::kill(pid_, SIGCONT); }

  // A TCP port on 127.0.0.1 nothing listened on a moment ago (another process may take it).
  static int free_port() {
    const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in address{};
    address.sin_family = AF_INET;
    address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t length = sizeof address;
    if (::bind(fd, reinterpret_cast<sockaddr*>(&address), sizeof address) != 0 ||
        ::getsockname(fd, reinterpret_cast<sockaddr*>(&address), &length) != 0) {
      ::close(fd);
      throw std::runtime_error("no free TCP port on 127.0.0.1");
    }
    ::close(fd);
    return ntohs(address.sin_port);
  }

 private:
  // The state letter of /proc/<pid>/stat (R, S, T, ...), after the command name in parentheses.
  [[nodiscard]] char process_state() const {
    std::ifstream in("/proc/" + std::to_string(pid_) + "/stat");
    const std::string stat((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    const auto close = stat.rfind(')');
    return close == std::string::npos || close + 2 >= stat.size() ? '?' : stat[close + 2];
  }

  static int& counter() {
    static int n = 0;
    return n;
  }

  static std::string find_binary() {
    if (const char* override_path = std::getenv("TESSERA_TEST_ETCD")) return override_path;
    const char* path = std::getenv("PATH");
    std::stringstream folders(path != nullptr ? path : "/usr/bin:/bin");
    for (std::string folder; std::getline(folders, folder, ':');) {
      const auto candidate = std::filesystem::path(folder) / "etcd";
      if (::access(candidate.c_str(), X_OK) == 0) return candidate.string();
    }
    throw std::runtime_error(
        "etcd is not installed (no `etcd` on PATH, TESSERA_TEST_ETCD unset): the etcd store's "
        "tests need a real server; run tools/dev/install-deps.sh (Debian package etcd-server)");
  }

  void start() {
    const auto client = "http://127.0.0.1:" + std::to_string(client_port_);
    const auto peer = "http://127.0.0.1:" + std::to_string(peer_port_);
    std::vector<std::string> args = {binary_,
                                     "--name=tessera-test",
                                     "--data-dir=" + (folder_ / "data").string(),
                                     "--listen-client-urls=" + client,
                                     "--advertise-client-urls=" + client,
                                     "--listen-peer-urls=" + peer,
                                     "--initial-advertise-peer-urls=" + peer,
                                     "--initial-cluster=tessera-test=" + peer,
                                     "--heartbeat-interval=50",
                                     "--election-timeout=500",
                                     "--logger=zap",
                                     "--log-level=warn"};
    args.insert(args.end(), extra_flags_.begin(), extra_flags_.end());
    const auto log = (folder_ / "etcd.log").string();
    const pid_t parent = ::getpid();
    pid_ = ::fork();
    if (pid_ < 0) throw std::runtime_error("fork failed starting etcd");
    if (pid_ == 0) {
      ::prctl(PR_SET_PDEATHSIG, SIGKILL);
      if (::getppid() != parent) ::_exit(1);
      if (std::freopen(log.c_str(), "a", stdout) == nullptr) ::_exit(1);
      ::dup2(::fileno(stdout), 2);
      std::vector<char*> argv;
      for (auto& a : args) argv.push_back(a.data());
      argv.push_back(nullptr);
      ::execv(argv[0], argv.data());
      ::_exit(127);
    }
    wait_until_healthy(log);
  }

  // Until GET /health answers "true": the member has elected itself and serves requests.
  void wait_until_healthy(const std::string& log) {
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(30);
    while (std::chrono::steady_clock::now() < deadline) {
      int status = 0;
      if (::waitpid(pid_, &status, WNOHANG) == pid_) {
        pid_ = -1;
        throw std::runtime_error("etcd exited at start; its log " + log + ":\n" + tail(log));
      }
      if (healthy()) return;
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
    throw std::runtime_error("etcd did not become healthy within 30 s; its log " + log + ":\n" +
                             tail(log));
  }

  [[nodiscard]] bool healthy() const {
    const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in address{};
    address.sin_family = AF_INET;
    address.sin_port = htons(static_cast<std::uint16_t>(client_port_));
    address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    timeval limit{1, 0};
    ::setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &limit, sizeof limit);
    std::string answer;
    if (::connect(fd, reinterpret_cast<sockaddr*>(&address), sizeof address) == 0) {
      const std::string request = "GET /health HTTP/1.0\r\nHost: 127.0.0.1\r\n\r\n";
      if (::send(fd, request.data(), request.size(), MSG_NOSIGNAL) ==
          static_cast<ssize_t>(request.size())) {
        char buffer[1024];
        for (ssize_t n; (n = ::recv(fd, buffer, sizeof buffer, 0)) > 0;) answer.append(buffer, n);
      }
    }
    ::close(fd);
    return answer.find("\"health\":\"true\"") != std::string::npos;
  }

  static std::string tail(const std::string& path) {
    std::ifstream in(path);
    std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    return text.size() > 2000 ? text.substr(text.size() - 2000) : text;
  }

  std::vector<std::string> extra_flags_;
  std::string binary_;
  std::filesystem::path folder_;
  int client_port_ = 0;
  int peer_port_ = 0;
  pid_t pid_ = -1;
  pid_t owner_ = ::getpid();  // the process whose server and folder these are
};

}  // namespace tessera::store_test
