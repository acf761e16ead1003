// A hostile process beside a real training job: while two launched workers rendezvous and
// train through the launcher's tcp store, another process on the host opens many idle
// connections to the store and announces huge frames on others. The job must finish as it
// would alone, and the store's server (the launcher) must not hold what the intruder sends.
#include <arpa/inet.h>
#include <fcntl.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <string>
#include <thread>
#include <vector>

extern char** environ;

namespace {

namespace fs = std::filesystem;
using namespace std::chrono_literals;

int free_port() {
  const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof addr;
  ::bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr);
  ::getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len);
  ::close(fd);
  return ntohs(addr.sin_port);
}

int connect_to(int port) {
  const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(static_cast<std::uint16_t>(port));
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (::connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) == 0) return fd;
  ::close(fd);
  return -1;
}

bool closed_by_peer(int fd) {
  pollfd p{fd, POLLIN, 0};
  if (::poll(&p, 1, 0) <= 0) return false;
  char byte;
  const auto n = ::recv(fd, &byte, 1, MSG_DONTWAIT);
  return n == 0 || (n < 0 && errno == ECONNRESET);
}

struct JobResult {
  int status = -1;
  long max_rss_kib = 0;  // the launcher's, or its largest worker's
};

class StoreUnderAttack : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() / ("tessera-store-attack-" + std::to_string(::getpid()));
    fs::remove_all(dir_);
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }

  // Starts `tessera launch -n 2` of `tessera train` over shm with its store on `port`.
  pid_t start_job(int port, const std::string& log) const {
    const std::vector<std::string> words{TESSERA_CLI_PATH,
                                         "launch",
                                         "-n",
                                         "2",
                                         "--store-port",
                                         std::to_string(port),
                                         "--",
                                         TESSERA_CLI_PATH,
                                         "train",
                                         "--runtime.store=tcp",
                                         "--runtime.transport=shm",
                                         "--runtime.timeout=60s",
                                         "--train.dataset=synthetic",
                                         "--dataset.synthetic.samples=2000",
                                         "--dataset.synthetic.test_samples=200",
                                         "--dataset.synthetic.features=32",
                                         "--dataset.synthetic.classes=4",
                                         "--model.mlp.layers=32,64,4",
                                         "--train.optimizer=sgd",
                                         "--train.batch_size=16",
                                         "--train.epochs=2",
                                         "--train.lr=0.05",
                                         "--train.progress=off",
                                         "--train.seed=5"};
    std::vector<char*> argv;
    for (const auto& w : words) argv.push_back(const_cast<char*>(w.c_str()));
    argv.push_back(nullptr);
    posix_spawn_file_actions_t actions;
    posix_spawn_file_actions_init(&actions);
    posix_spawn_file_actions_addopen(&actions, 1, log.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    posix_spawn_file_actions_adddup2(&actions, 1, 2);
    pid_t pid = -1;
    const int rc = ::posix_spawn(&pid, argv[0], &actions, nullptr, argv.data(), environ);
    posix_spawn_file_actions_destroy(&actions);
    return rc == 0 ? pid : -1;
  }

  // Waits for the job at most two minutes (then kills it), with its peak memory.
  static JobResult finish(pid_t pid) {
    JobResult result;
    rusage usage{};
    const auto deadline = std::chrono::steady_clock::now() + 120s;
    for (;;) {
      const pid_t done = ::wait4(pid, &result.status, WNOHANG, &usage);
      if (done == pid) break;
      if (std::chrono::steady_clock::now() > deadline) {
        ::kill(pid, SIGKILL);
        ::wait4(pid, &result.status, 0, &usage);
        result.status = -1;
        break;
      }
      std::this_thread::sleep_for(20ms);
    }
    result.max_rss_kib = usage.ru_maxrss;
    return result;
  }

  std::string read(const std::string& file) const {
    std::ifstream in(file);
    return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
  }

  fs::path dir_;
};

TEST_F(StoreUnderAttack, TrainingFinishesAndTheStoreHoldsNothingOfAFloodOfStrangers) {
  // The same job alone first: its peak memory is the yardstick.
  const auto alone_log = (dir_ / "alone.txt").string();
  const pid_t alone = start_job(free_port(), alone_log);
  ASSERT_GT(alone, 0);
  const auto quiet = finish(alone);
  ASSERT_EQ(quiet.status, 0) << read(alone_log);

  const int port = free_port();
  const auto log = (dir_ / "attacked.txt").string();
  const pid_t job = start_job(port, log);
  ASSERT_GT(job, 0);

  std::vector<int> idle;
  std::size_t streamed = 0;
  {
    // The attack starts as soon as the store listens, while the workers rendezvous.
    const auto give_up = std::chrono::steady_clock::now() + 30s;
    int probe = -1;
    while (probe < 0 && std::chrono::steady_clock::now() < give_up) {
      probe = connect_to(port);
      if (probe < 0) std::this_thread::sleep_for(5ms);
    }
    ASSERT_GE(probe, 0) << "the launcher's store never listened on port " << port;
    idle.push_back(probe);
    for (int i = 0; i < 300; ++i)
      if (const int fd = connect_to(port); fd >= 0) idle.push_back(fd);
    // Four strangers announce 256 MiB frames and send up to 64 MiB of them each.
    std::vector<std::thread> senders;
    std::vector<std::size_t> sent(4, 0);
    for (std::size_t s = 0; s < sent.size(); ++s) {
      senders.emplace_back([&, s] {
        const int fd = connect_to(port);
        if (fd < 0) return;
        const std::uint32_t announced = htonl(256u << 20);
        std::string chunk(1 << 20, '\0');
        std::memcpy(chunk.data(), &announced, sizeof announced);
        const auto stop = std::chrono::steady_clock::now() + 10s;
        while (sent[s] < (64u << 20) && std::chrono::steady_clock::now() < stop) {
          const auto n = ::send(fd, chunk.data(), chunk.size(), MSG_NOSIGNAL);
          if (n <= 0) break;  // the server closed the connection
          sent[s] += static_cast<std::size_t>(n);
          chunk.assign(chunk.size(), '\0');
        }
        ::close(fd);
      });
    }
    for (auto& t : senders) t.join();
    for (const auto n : sent) streamed += n;
  }

  const auto attacked = finish(job);
  std::size_t dropped = 0;
  for (const int fd : idle) {
    dropped += closed_by_peer(fd) ? 1 : 0;
    ::close(fd);
  }
  const auto output = read(log);
  ASSERT_EQ(attacked.status, 0) << output;
  EXPECT_NE(output.find("test accuracy"), std::string::npos) << output;
  // 64 strangers may wait for their hello at a time: the rest were closed to make room.
  EXPECT_GE(dropped, idle.size() - 64) << "of " << idle.size() << " idle connections";
  // Whatever the strangers pushed (socket buffers take a few MB before the server drops
  // them), the server held none of it.
  EXPECT_LT(attacked.max_rss_kib, quiet.max_rss_kib + 32 * 1024)
      << "alone: " << quiet.max_rss_kib << " KiB, under attack: " << attacked.max_rss_kib
      << " KiB, strangers sent " << streamed << " bytes";
}

}  // namespace
