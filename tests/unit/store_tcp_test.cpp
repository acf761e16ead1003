// What only the tcp store does: tokens, reconnecting, finding the server from the environment.
#include <arpa/inet.h>
#include <fcntl.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <poll.h>
#include <stdlib.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <limits>
#include <map>
#include <optional>
#include <thread>
#include <vector>

#include "blocked_call.hpp"
#include "tessera/base/error.hpp"
#include "tessera/plugin/store.hpp"
#include "tessera/registry/registry.hpp"

namespace tessera {
namespace {

using namespace std::chrono_literals;

// The wire format of plugins/stores/tcp/protocol.hpp, written out independently so that these
// tests speak to the server the way a hostile process on the host would.
std::string be(std::uint64_t value, int bytes) {
  std::string out;
  for (int i = bytes - 1; i >= 0; --i) out.push_back(static_cast<char>((value >> (8 * i)) & 0xff));
  return out;
}
std::string frame(const std::string& payload) {
  return be(payload.size(), 4) + payload;
}
std::string hello(const std::string& token, std::uint64_t version = 2) {
  return frame(std::string(1, '\x01') + be(0x7465737365726131, 8) + be(version, 8) +
               be(token.size(), 4) + token);
}
// Status::refused, then the server's protocol version.
std::string refusal() {
  return frame("\x02" + be(2, 8));
}
std::string set_request(const std::string& key, const std::string& value) {
  return frame(std::string(1, '\x02') + be(key.size(), 4) + key + be(value.size(), 4) + value);
}

// A plain blocking socket to 127.0.0.1:port, or -1.
int raw_connect(const std::string& port) {
  const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(static_cast<std::uint16_t>(std::stoi(port)));
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (fd >= 0 && ::connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) == 0) return fd;
  if (fd >= 0) ::close(fd);
  return -1;
}

// Sends what the peer takes within `wait`; returns the bytes sent (fewer when it closed).
std::size_t send_some(int fd, const std::string& data, std::chrono::milliseconds wait = 2s) {
  std::size_t sent = 0;
  const auto deadline = std::chrono::steady_clock::now() + wait;
  while (sent < data.size() && std::chrono::steady_clock::now() < deadline) {
    pollfd p{fd, POLLOUT, 0};
    if (::poll(&p, 1, 50) <= 0) continue;
    const auto n = ::send(fd, data.data() + sent, data.size() - sent, MSG_NOSIGNAL | MSG_DONTWAIT);
    if (n < 0 && (errno == EAGAIN || errno == EINTR)) continue;
    if (n <= 0) break;
    sent += static_cast<std::size_t>(n);
  }
  return sent;
}

// Everything the server sends until it closes the connection; nullopt if it is still open
// after `wait`.
std::optional<std::string> read_until_closed(int fd, std::chrono::milliseconds wait) {
  std::string got;
  const auto deadline = std::chrono::steady_clock::now() + wait;
  while (std::chrono::steady_clock::now() < deadline) {
    pollfd p{fd, POLLIN, 0};
    if (::poll(&p, 1, 20) <= 0) continue;
    char buffer[4096];
    const auto n = ::recv(fd, buffer, sizeof buffer, MSG_DONTWAIT);
    if (n == 0 || (n < 0 && errno == ECONNRESET)) return got;
    if (n > 0) got.append(buffer, static_cast<std::size_t>(n));
  }
  return std::nullopt;
}

// Closes the file descriptors it holds when the test ends, whatever its outcome.
struct RawSockets {
  std::vector<int> fds;
  ~RawSockets() {
    for (const int fd : fds)
      if (fd >= 0) ::close(fd);
  }
};

class TcpStoreTest : public ::testing::Test {
 protected:
  void SetUp() override { registry_.scan_directory(TESSERA_PLUGIN_DIR); }

  std::shared_ptr<Store> create(std::map<std::string, std::string> values) {
    const auto defaults = registry_.default_options(PluginKind::store, "tcp");
    return registry_.create<Store>(
        "tcp", Options(defaults.section(), defaults.specs(), std::move(values)));
  }
  std::shared_ptr<Store> serve(const std::string& port = "0") {
    return create({{"serve", "true"}, {"port", port}, {"token", "right-token"}});
  }
  static std::string port_of(const Store& store) {
    const auto address = store.address();
    return address.substr(address.rfind(':') + 1);
  }

  PluginRegistry registry_;
};

TEST_F(TcpStoreTest, ServerBindsLoopbackOnAFreePortByDefault) {
  auto server = serve();
  EXPECT_TRUE(server->address().starts_with("127.0.0.1:")) << server->address();
  EXPECT_NE(port_of(*server), "0");
}

TEST_F(TcpStoreTest, AClientWithTheWrongTokenIsRefusedWithAClearError) {
  auto server = serve();
  auto intruder = create(
      {{"host", "127.0.0.1"}, {"port", port_of(*server)}, {"token", "wrong"}, {"timeout", "5s"}});
  const auto start = std::chrono::steady_clock::now();
  try {
    intruder->set("k", "v");
    FAIL() << "the store accepted a wrong token";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("store refused the token"), std::string::npos) << e.what();
  }
  // Refusal is final, not a transient error to retry until the timeout.
  EXPECT_LT(std::chrono::steady_clock::now() - start, 2s);
  EXPECT_FALSE(server->check("k"));
}

TEST_F(TcpStoreTest, AClientReconnectsToARestartedServerWithinItsTimeout) {
  auto server = serve();
  const auto port = port_of(*server);
  auto client =
      create({{"host", "127.0.0.1"}, {"port", port}, {"token", "right-token"}, {"timeout", "20s"}});
  client->set("before", "1");
  server.reset();  // the server goes away with its data
  testing::BlockedCall set;
  std::thread restart([&] {
    EXPECT_TRUE(set.wait_until_blocked()) << "the set did not wait for a server";
    server = serve(port);
  });
  set.entering();
  client->set("after", "2");  // retries until the new server listens
  set.returned();
  restart.join();
  EXPECT_EQ(server->get("after", 1s), "2");
  EXPECT_FALSE(server->check("before"));
}

TEST_F(TcpStoreTest, AClientGivesUpWhenNoServerAppearsWithinItsTimeout) {
  std::string port;
  {
    auto gone = serve();
    port = port_of(*gone);
  }
  auto client = create(
      {{"host", "127.0.0.1"}, {"port", port}, {"token", "right-token"}, {"timeout", "300ms"}});
  const auto start = std::chrono::steady_clock::now();
  EXPECT_THROW(client->set("k", "v"), Error);
  EXPECT_LT(std::chrono::steady_clock::now() - start, 5s);
}

TEST_F(TcpStoreTest, AClientWithoutOptionsFindsTheServerThroughTheEnvironment) {
  auto server = serve();
  ::setenv("TESSERA_STORE_ADDR", server->address().c_str(), 1);
  ::setenv("TESSERA_STORE_TOKEN", "right-token", 1);
  std::shared_ptr<Store> client;
  EXPECT_NO_THROW(client = create({}));
  ::unsetenv("TESSERA_STORE_ADDR");
  ::unsetenv("TESSERA_STORE_TOKEN");
  ASSERT_TRUE(client);
  client->set("via-env", "yes");
  EXPECT_EQ(server->get("via-env", 1s), "yes");
}

TEST_F(TcpStoreTest, AClientWithNoServerAddressAnywhereIsAConfigError) {
  ::unsetenv("TESSERA_STORE_ADDR");
  EXPECT_THROW((void)create({{"token", "t"}}), ConfigError);
}

TEST_F(TcpStoreTest, AServerWithoutATokenIsAConfigError) {
  ::unsetenv("TESSERA_STORE_TOKEN");
  EXPECT_THROW((void)create({{"serve", "true"}}), ConfigError);
}

TEST_F(TcpStoreTest, AServerOnAPortInUseFailsClearly) {
  auto first = serve();
  EXPECT_THROW((void)serve(port_of(*first)), Error);
}

TEST_F(TcpStoreTest, AnAddPastTheSixtyFourBitRangeIsRefusedAndLeavesTheValue) {
  auto server = serve();
  const auto max = std::numeric_limits<std::int64_t>::max();
  EXPECT_EQ(server->add("n", max), max);
  try {
    (void)server->add("n", 1);
    FAIL() << "an add overflowed silently";
  } catch (const InvalidArgument& e) {
    EXPECT_NE(std::string(e.what()).find("'n'"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("overflows"), std::string::npos) << e.what();
  }
  EXPECT_EQ(server->get("n", 1s), std::to_string(max));
  EXPECT_EQ(server->add("n", -max), 0);
}

TEST_F(TcpStoreTest, ARawFirstFrameOtherThanHelloIsRefusedAndTheConnectionClosed) {
  auto server = serve();
  RawSockets raw;
  const int fd = raw.fds.emplace_back(raw_connect(port_of(*server)));
  ASSERT_GE(fd, 0);
  const auto request = set_request("k", "v");
  ASSERT_EQ(send_some(fd, request), request.size());
  const auto answer = read_until_closed(fd, 5s);
  ASSERT_TRUE(answer) << "the server kept a connection that skipped the hello";
  EXPECT_EQ(*answer, refusal());
  EXPECT_FALSE(server->check("k"));

  // The same request after a hello is served: the refusal was for the missing hello.
  const int admitted = raw.fds.emplace_back(raw_connect(port_of(*server)));
  ASSERT_GE(admitted, 0);
  const auto both = hello("right-token") + request;
  ASSERT_EQ(send_some(admitted, both), both.size());
  EXPECT_EQ(server->get("k", 2s), "v");
}

TEST_F(TcpStoreTest, AHelloOfAnotherProtocolVersionIsRefusedWithTheServersVersion) {
  auto server = serve();
  RawSockets raw;
  const int fd = raw.fds.emplace_back(raw_connect(port_of(*server)));
  ASSERT_GE(fd, 0);
  const auto old_hello = hello("right-token", 1);
  ASSERT_EQ(send_some(fd, old_hello), old_hello.size());
  const auto answer = read_until_closed(fd, 5s);
  ASSERT_TRUE(answer) << "the server kept a connection of another protocol version";
  EXPECT_EQ(*answer, refusal());
}

// A server of another release that says its version: the client names the mismatch, not the
// token.
TEST_F(TcpStoreTest, AClientTellsAServerOfAnotherVersionFromAWrongToken) {
  const int listener = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  ASSERT_GE(listener, 0);
  RawSockets raw;
  raw.fds.push_back(listener);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  ASSERT_EQ(::bind(listener, reinterpret_cast<sockaddr*>(&addr), sizeof addr), 0);
  ASSERT_EQ(::listen(listener, 4), 0);
  socklen_t length = sizeof addr;
  ASSERT_EQ(::getsockname(listener, reinterpret_cast<sockaddr*>(&addr), &length), 0);
  std::thread old_server([listener] {
    const int fd = ::accept(listener, nullptr, nullptr);
    if (fd < 0) return;
    char buffer[256];
    (void)!::recv(fd, buffer, sizeof buffer, 0);  // the hello
    const auto answer = frame("\x02" + be(1, 8));
    (void)!::send(fd, answer.data(), answer.size(), MSG_NOSIGNAL);
    ::close(fd);
  });
  auto client = create({{"host", "127.0.0.1"},
                        {"port", std::to_string(ntohs(addr.sin_port))},
                        {"token", "right-token"},
                        {"timeout", "5s"}});
  try {
    client->set("k", "v");
    FAIL() << "a server of protocol 1 accepted the request";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("speaks protocol version 1"), std::string::npos)
        << e.what();
  }
  old_server.join();
}

// A rank's connection may break and come back; its lease lives on the server until it ends.
TEST_F(TcpStoreTest, LeasesOutliveTheConnectionsThatGrantedThem) {
  auto server = serve();
  const std::map<std::string, std::string> client_options{
      {"host", "127.0.0.1"}, {"port", port_of(*server)}, {"token", "right-token"}};
  auto holder = create(client_options);
  const auto lease = holder->grant_lease(60s);
  holder->set("members/r1", "here", lease);
  holder.reset();  // every connection of that client closes
  // Time for the server to see the closes: nothing it does shows that it has, and a server that
  // ended leases with their connections would have removed the key by then.
  std::this_thread::sleep_for(200ms);
  EXPECT_EQ(server->get("members/r1", 0ms), "here");
  auto reconnected = create(client_options);
  reconnected->keep_alive(lease);
  reconnected->revoke_lease(lease);
  EXPECT_FALSE(server->check("members/r1"));
}

TEST_F(TcpStoreTest, AListLargerThanOneReplyIsInvalidArgumentAndTheStoreGoesOn) {
#if defined(__SANITIZE_THREAD__)
  // 66 MiB through the instrumented server and client outlasts ctest's timeout under
  // ThreadSanitizer (4 s in a plain build); the server's threads are covered by the other
  // TcpStoreTest cases, which move small frames.
  GTEST_SKIP() << "moves 66 MiB: too slow under ThreadSanitizer";
#endif
  auto server = serve();
  const std::string over_half(33u << 20, 'x');  // two of them exceed one reply
  server->set("big/1", over_half);
  server->set("big/2", over_half);
  try {
    (void)server->list("big/");
    FAIL() << "a list of 66 MiB came back";
  } catch (const InvalidArgument& e) {
    EXPECT_NE(std::string(e.what()).find("narrower prefix"), std::string::npos) << e.what();
  }
  EXPECT_EQ(server->list("big/2").size(), 1U);
}

TEST_F(TcpStoreTest, AHugeFrameAnnouncedBeforeTheHelloIsDroppedUnread) {
  auto server = serve();
  RawSockets raw;
  const int fd = raw.fds.emplace_back(raw_connect(port_of(*server)));
  ASSERT_GE(fd, 0);
  // 256 MiB announced, then a stream of its body: the server must not wait for (or hold) it.
  const std::string body(8 << 20, '\0');
  const auto sent = send_some(fd, be(256u << 20, 4) + body, 3s);
  EXPECT_LT(sent, body.size()) << "the server read 8 MiB from a client without the token";
  EXPECT_TRUE(read_until_closed(fd, 2s)) << "the server kept the connection";
  server->set("still", "serving");
  EXPECT_EQ(server->get("still", 1s), "serving");
}

TEST_F(TcpStoreTest, ConnectionsWithoutAHelloAreCappedAndTimedOutWhileRanksAreServed) {
  auto server = create({{"serve", "true"},
                        {"token", "right-token"},
                        {"max_pending", "8"},
                        {"hello_timeout", "1500ms"}});
  const auto port = port_of(*server);
  auto rank =
      create({{"host", "127.0.0.1"}, {"port", port}, {"token", "right-token"}, {"timeout", "10s"}});
  rank->set("before", "1");  // an admitted connection, idle in the client's pool
  RawSockets idle;
  for (int i = 0; i < 40; ++i) {
    idle.fds.push_back(raw_connect(port));
    ASSERT_GE(idle.fds.back(), 0);
  }
  // The oldest 32 make room for newer ones at once; the 8 newest go at the hello timeout.
  std::size_t closed = 0;
  for (std::size_t i = 0; i < 32; ++i) closed += read_until_closed(idle.fds[i], 1s) ? 1 : 0;
  EXPECT_EQ(closed, 32U);
  // Ranks keep working, over their admitted connection and over new ones.
  rank->set("during", "2");
  auto late =
      create({{"host", "127.0.0.1"}, {"port", port}, {"token", "right-token"}, {"timeout", "10s"}});
  EXPECT_EQ(late->get("during", 1s), "2");
  for (std::size_t i = 32; i < idle.fds.size(); ++i)
    EXPECT_TRUE(read_until_closed(idle.fds[i], 4s))
        << "idle connection " << i << " outlived the hello timeout";
  EXPECT_EQ(rank->get("before", 1s), "1");
}

// Out of descriptors, accept() fails while the connection stays in the backlog, so the
// listener polls ready forever: the server must shed such connections, not spin on them.
TEST_F(TcpStoreTest, RunningOutOfDescriptorsNeitherSpinsTheServerNorStopsAdmittedRanks) {
  auto server = serve();
  const auto port = port_of(*server);
  auto rank =
      create({{"host", "127.0.0.1"}, {"port", port}, {"token", "right-token"}, {"timeout", "10s"}});
  rank->set("before", "1");
  // Sockets made now, connected once no descriptor is left for the server to accept them with.
  RawSockets flood;
  for (int i = 0; i < 16; ++i)
    flood.fds.push_back(::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0));
  // Per thread, the time it was running or ready to run (/proc schedstat: on the CPU plus
  // waiting in the run queue). A spinning thread is ready all the time, however loaded the
  // machine is and however little CPU it gets; an idle one is neither. The files are opened
  // now: once descriptors run out, nothing more can be opened.
  struct ThreadClocks {
    std::vector<std::pair<std::string, int>> files;
    ~ThreadClocks() {
      for (const auto& f : files) ::close(f.second);
    }
  } clocks;
  for (const auto& task : std::filesystem::directory_iterator("/proc/self/task")) {
    const int fd = ::open((task.path() / "schedstat").c_str(), O_RDONLY | O_CLOEXEC);
    if (fd >= 0) clocks.files.emplace_back(task.path().filename().string(), fd);
  }
  const auto runnable_ns = [&clocks] {
    std::map<std::string, long long> threads;
    for (const auto& [tid, fd] : clocks.files) {
      char text[128] = {};
      if (::pread(fd, text, sizeof text - 1, 0) <= 0) continue;
      long long on_cpu = 0;
      long long waiting = 0;
      if (std::sscanf(text, "%lld %lld", &on_cpu, &waiting) == 2) threads[tid] = on_cpu + waiting;
    }
    return threads;
  };
  rlimit saved{};
  ASSERT_EQ(::getrlimit(RLIMIT_NOFILE, &saved), 0);
  const int lowest_free = ::dup(0);
  ASSERT_GE(lowest_free, 0);
  ::close(lowest_free);
  rlimit exhausted = saved;
  exhausted.rlim_cur = static_cast<rlim_t>(lowest_free);
  ASSERT_EQ(::setrlimit(RLIMIT_NOFILE, &exhausted), 0);
  struct Restore {
    rlimit limit;
    ~Restore() { ::setrlimit(RLIMIT_NOFILE, &limit); }
  } restore{saved};

  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(static_cast<std::uint16_t>(std::stoi(port)));
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  for (const int fd : flood.fds)
    ASSERT_EQ(::connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr), 0);

  const auto before = runnable_ns();
  ASSERT_FALSE(before.empty()) << "no /proc/self/task/*/schedstat to measure with";
  std::this_thread::sleep_for(1s);  // the window the threads' CPU time is measured over
  const auto after = runnable_ns();
  long long busiest = 0;
  for (const auto& [tid, ns] : after) {
    const auto it = before.find(tid);
    if (it != before.end()) busiest = std::max(busiest, ns - it->second);
  }
  EXPECT_LT(busiest, 300'000'000LL)
      << "a thread of the store was runnable for " << busiest / 1'000'000
      << " ms of 1000: the store loop spins on EMFILE";
  rank->set("during", "2");  // the admitted connection is still served
  EXPECT_EQ(rank->get("before", 1s), "1");

  ::setrlimit(RLIMIT_NOFILE, &saved);
  auto late =
      create({{"host", "127.0.0.1"}, {"port", port}, {"token", "right-token"}, {"timeout", "10s"}});
  EXPECT_EQ(late->get("during", 1s), "2");
}

}  // namespace
}  // namespace tessera
