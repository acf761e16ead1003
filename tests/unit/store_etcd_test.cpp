// What only the etcd store does: a real etcd server that dies, stops or restarts under it,
// etcd's own limits on leases, and its options.
#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <functional>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "blocked_call.hpp"
#include "etcd_server.hpp"
#include "store_contract.hpp"
#include "tessera/base/error.hpp"

namespace tessera {
namespace {

using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;
using store_test::EtcdServer;

// Scheduling delays a loaded 2-core machine may add to a call that should end on time.
constexpr auto kSchedulingMargin = 3s;

class EtcdStoreTest : public ::testing::Test {
 protected:
  void SetUp() override { registry_.scan_directory(TESSERA_PLUGIN_DIR); }

  std::shared_ptr<Store> open(const std::string& endpoints, const std::string& timeout) {
    return store_test::create_store(
        registry_, "etcd", {{"endpoints", endpoints}, {"prefix", "job/"}, {"timeout", timeout}});
  }

  static bool contains(const std::string& text, const std::string& part) {
    return text.find(part) != std::string::npos;
  }

  PluginRegistry registry_;
};

TEST_F(EtcdStoreTest, KeysLiveUnderThePrefixAndListWithoutIt) {
  EtcdServer etcd;
  auto job = open(etcd.endpoint(), "10s");
  auto everything = store_test::create_store(
      registry_, "etcd", {{"endpoints", etcd.endpoint()}, {"prefix", ""}, {"timeout", "10s"}});
  job->set("a", "1");
  everything->set("other/b", "2");
  EXPECT_EQ(everything->get("job/a", 0ms), "1");
  using List = std::vector<std::pair<std::string, std::string>>;
  EXPECT_EQ(job->list(""), (List{{"a", "1"}}));
  EXPECT_EQ(everything->list("").size(), 2U);
  EXPECT_EQ(job->address(), etcd.endpoint());
}

TEST_F(EtcdStoreTest, TheNextEndpointServesWhenTheFirstRefuses) {
  std::string dead;
  {
    EtcdServer gone;
    dead = gone.endpoint();
  }
  EtcdServer etcd;
  auto store = open(dead + "," + etcd.endpoint(), "5s");
  const auto start = Clock::now();
  store->set("k", "v");
  EXPECT_LT(Clock::now() - start, kSchedulingMargin);
  testing::BlockedCall watch;
  std::thread writer([&, other = open(etcd.endpoint(), "5s")] {
    EXPECT_TRUE(watch.wait_until_blocked()) << "the watch did not wait for the change";
    other->set("k", "w");
  });
  watch.entering();
  EXPECT_EQ(store->wait_for_change("k", "v", 30s), "w");
  watch.returned();
  writer.join();
}

TEST_F(EtcdStoreTest, ListReadsManyPagesAsOneSnapshot) {
  EtcdServer etcd;
  auto store = open(etcd.endpoint(), "10s");
  constexpr int kKeys = 1200;  // the store reads 1000 keys a page: two pages
  for (int i = 0; i < kKeys; ++i) store->set("k/" + std::to_string(100000 + i), std::to_string(i));
  const auto listed = store->list("k/");
  ASSERT_EQ(listed.size(), static_cast<std::size_t>(kKeys));
  for (int i = 0; i < kKeys; ++i) EXPECT_EQ(listed[i].second, std::to_string(i));
}

TEST_F(EtcdStoreTest, AnUnreachableServerIsAnErrorNamingTheEndpointAndTheOption) {
  std::string endpoint;
  {
    EtcdServer etcd;  // a port that was etcd's a moment ago, now refusing
    endpoint = etcd.endpoint();
  }
  auto store = open(endpoint, "300ms");
  const auto start = Clock::now();
  try {
    store->set("k", "v");
    FAIL() << "set reached no server and returned";
  } catch (const Timeout& e) {
    FAIL() << "an unreachable server is not a Timeout of the key: " << e.what();
  } catch (const Error& e) {
    const std::string message = e.what();
    EXPECT_TRUE(contains(message, endpoint)) << message;
    EXPECT_TRUE(contains(message, "store.etcd.endpoints")) << message;
    EXPECT_TRUE(contains(message, "start etcd")) << message;
    EXPECT_FALSE(contains(message, ".cpp")) << message;
  }
  EXPECT_GE(Clock::now() - start, 300ms);
  EXPECT_LT(Clock::now() - start, 300ms + kSchedulingMargin);
}

// Something on etcd's port that answers every request with HTTP 200 and `body`, then closes
// the connection: not etcd, or an etcd answering what the store does not expect.
class FixedAnswerServer {
 public:
  explicit FixedAnswerServer(std::string body) : body_(std::move(body)) {
    listener_ = ::socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in address{};
    address.sin_family = AF_INET;
    address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t length = sizeof address;
    if (listener_ < 0 || ::bind(listener_, reinterpret_cast<sockaddr*>(&address), length) != 0 ||
        ::listen(listener_, 16) != 0 ||
        ::getsockname(listener_, reinterpret_cast<sockaddr*>(&address), &length) != 0)
      throw std::runtime_error("FixedAnswerServer: no loopback port");
    port_ = ntohs(address.sin_port);
    thread_ = std::thread([this] { serve(); });
  }
  ~FixedAnswerServer() {
    stop_ = true;
    thread_.join();
    ::close(listener_);
  }
  [[nodiscard]] std::string endpoint() const { return "127.0.0.1:" + std::to_string(port_); }

 private:
  void serve() {
    const std::string answer =
        "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n"
        "Connection: close\r\nContent-Length: " +
        std::to_string(body_.size()) + "\r\n\r\n" + body_;
    while (!stop_) {
      pollfd ready{listener_, POLLIN, 0};
      if (::poll(&ready, 1, 50) <= 0) continue;
      const int client = ::accept(listener_, nullptr, nullptr);
      if (client < 0) continue;
      // The whole request (the store's are small): up to the end of its headers and body.
      std::string request;
      char chunk[4096];
      while (request.find("\r\n\r\n") == std::string::npos || request.back() != '}') {
        const auto got = ::recv(client, chunk, sizeof chunk, 0);
        if (got <= 0) break;
        request.append(chunk, static_cast<std::size_t>(got));
      }
      (void)::send(client, answer.data(), answer.size(), MSG_NOSIGNAL);
      ::close(client);
    }
  }

  std::string body_;
  int listener_ = -1;
  int port_ = 0;
  std::atomic<bool> stop_{false};
  std::thread thread_;
};

TEST_F(EtcdStoreTest, AnAnswerThatIsNotAJsonObjectIsAnErrorNamingTheEndpoint) {
  // Valid JSON of the wrong shape: reading its fields must not throw the JSON library's own
  // exceptions through the store.
  for (const std::string body : {"[1]", "5", "\"text\""}) {
    FixedAnswerServer server(body);
    auto store = open(server.endpoint(), "2s");
    for (const auto& call : std::vector<std::function<void()>>{
             [&] { (void)store->get("k", 1s); }, [&] { store->set("k", "v"); },
             [&] { (void)store->compare_set("k", "", "v"); }, [&] { (void)store->list(""); },
             [&] { (void)store->grant_lease(2s); }}) {
      try {
        call();
        ADD_FAILURE() << "a call answered with " << body << " returned";
      } catch (const Error& e) {
        EXPECT_TRUE(contains(e.what(), server.endpoint())) << e.what();
        EXPECT_TRUE(contains(e.what(), "not a JSON object")) << e.what();
      }
    }
  }
}

// A JSON object with a field etcd never sends in that form: an Error naming the server and the
// field, not a value made up from it (a revision "abc" read as 0 once ended in
// "basic_string::substr" from the listing) and no exception of the standard library.
TEST_F(EtcdStoreTest, AMalformedFieldInAnAnswerIsAnErrorNamingTheServerAndTheField) {
  struct Case {
    std::string body;
    std::function<void(Store&)> call;
    std::string field;  // as the message quotes it, with what is wrong
  };
  // "am9iL2s=" is "job/k" (the store's prefix is "job/"), "b3RoZXI=" "other", "dg==" "v".
  const std::vector<Case> cases = {
      {R"({"header":{"revision":"abc"}})", [](Store& s) { (void)s.get("k", 1s); },
       "field \"header.revision\" is \"abc\", not a 64-bit integer"},
      {R"({"header":{"revision":"abc"}})", [](Store& s) { (void)s.list(""); },
       "field \"header.revision\" is \"abc\""},
      {R"({"header":{"revision":"12abc"}})", [](Store& s) { (void)s.get("k", 1s); },
       "field \"header.revision\" is \"12abc\""},
      {R"({"header":{"revision":"9223372036854775807"}})", [](Store& s) { (void)s.get("k", 1s); },
       "field \"header.revision\" is 9223372036854775807, not a positive count"},
      {R"({"header":{"revision":"1"},"kvs":[{"key":"am9iL2s=","value":"dg==","mod_revision":[]}]})",
       [](Store& s) { (void)s.get("k", 1s); }, "field \"kvs[0].mod_revision\" is []"},
      {R"({"header":{"revision":"1"},"kvs":[{"key":"am9iL2s=","value":"*not base64*"}]})",
       [](Store& s) { (void)s.get("k", 1s); }, "field \"kvs[0].value\" is not base64"},
      {R"({"header":{"revision":"1"},"kvs":{"key":"am9iL2s="}})",
       [](Store& s) { (void)s.list(""); }, "field \"kvs\" is object, not an array"},
      {R"({"header":{"revision":"1"},"kvs":[{"key":"b3RoZXI=","value":"dg=="}]})",
       [](Store& s) { (void)s.list(""); }, "field \"kvs[0].key\" is outside the range asked for"},
      {R"({"header":{"revision":"1"},"kvs":[{"key":"am9iL2s=","value":"dg=="}],"more":"yes"})",
       [](Store& s) { (void)s.list(""); }, "field \"more\" is \"yes\", not true or false"},
      {R"({"header":"1"})", [](Store& s) { (void)s.get("k", 1s); },
       "field \"header\" is string, not an object"},
      {R"({"ID":"abc","TTL":"2"})", [](Store& s) { (void)s.grant_lease(2s); },
       "field \"ID\" is \"abc\""},
      {R"({"ID":"7"})", [](Store& s) { (void)s.grant_lease(2s); }, "field \"TTL\" is missing"},
  };
  for (const auto& c : cases) {
    SCOPED_TRACE(c.body);
    FixedAnswerServer server(c.body);
    auto store = open(server.endpoint(), "2s");
    try {
      c.call(*store);
      ADD_FAILURE() << "a call answered with " << c.body << " returned";
    } catch (const InvalidArgument& e) {
      ADD_FAILURE() << "a malformed answer reported as a bug: " << e.what();
    } catch (const Error& e) {
      EXPECT_TRUE(contains(e.what(), "etcd at " + server.endpoint() + " answering ")) << e.what();
      EXPECT_TRUE(contains(e.what(), "sent a malformed answer: " + c.field)) << e.what();
    } catch (const std::exception& e) {
      ADD_FAILURE() << "not a tessera::Error: " << e.what();
    }
  }
}

// etcd killed while calls wait on it: each fails with the endpoint in its message within the
// request timeout, none hangs; a restarted etcd (same data folder) is reached again.
TEST_F(EtcdStoreTest, AKilledServerFailsEveryCallWithinItsTimeoutAndARestartedOneServesAgain) {
  EtcdServer etcd;
  constexpr auto kTimeout = 2s;
  auto store = open(etcd.endpoint(), "2s");
  auto watcher_store = open(etcd.endpoint(), "2s");
  store->set("k", "v");
  std::atomic<bool> watcher_done{false};
  std::string watcher_error;
  Clock::time_point watcher_end;
  testing::BlockedCall watch;
  std::thread watcher([&] {
    watch.entering();
    try {
      (void)watcher_store->wait_for_change("k", "v", 60s);
      watcher_error = "returned";
    } catch (const Timeout& e) {
      watcher_error = std::string("Timeout: ") + e.what();
    } catch (const Error& e) {
      watcher_error = e.what();
    }
    watcher_end = Clock::now();
    watcher_done = true;
    watch.returned();
  });
  EXPECT_TRUE(watch.wait_until_blocked()) << "the watch was not open: " << watcher_error;
  etcd.kill_now();
  const auto killed = Clock::now();
  watcher.join();
  EXPECT_TRUE(contains(watcher_error, etcd.endpoint())) << watcher_error;
  EXPECT_LT(watcher_end - killed, kTimeout + kSchedulingMargin);

  for (const auto& call : {std::string("set"), std::string("get"), std::string("add")}) {
    const auto start = Clock::now();
    try {
      if (call == "set") store->set("k", "w");
      if (call == "get") (void)store->get("k", 60s);
      if (call == "add") (void)store->add("n", 1);
      ADD_FAILURE() << call << " returned with etcd dead";
    } catch (const Error& e) {
      EXPECT_TRUE(contains(e.what(), etcd.endpoint())) << call << ": " << e.what();
    }
    EXPECT_LT(Clock::now() - start, kTimeout + kSchedulingMargin) << call;
  }

  etcd.restart();
  EXPECT_EQ(store->get("k", 0ms), "v");
  store->set("k", "after restart");
  EXPECT_EQ(watcher_store->get("k", 0ms), "after restart");
}

// etcd stopped (SIGSTOP) for less than the request timeout: calls made meanwhile wait and
// succeed once it resumes; a watch open across the pause sees the change made after it.
TEST_F(EtcdStoreTest, AServerStoppedForLessThanTheTimeoutIsRiddenOut) {
  EtcdServer etcd;
  auto store = open(etcd.endpoint(), "10s");
  auto other = open(etcd.endpoint(), "10s");
  store->set("k", "before");
  (void)store->add("n", 1);
  std::optional<std::string> seen;
  testing::BlockedCall watch;
  std::thread watcher([&, watching = open(etcd.endpoint(), "10s")] {
    watch.entering();
    seen = watching->wait_for_change("k", "before", 30s);
    watch.returned();
  });
  EXPECT_TRUE(watch.wait_until_blocked()) << "the watch was not open before the pause";
  etcd.pause();
  const auto paused = Clock::now();
  std::thread resumer([&] {
    std::this_thread::sleep_for(1500ms);  // the stop this test rides out, shorter than the timeout
    etcd.resume();
  });
  EXPECT_NO_THROW(store->set("k", "during"));
  EXPECT_GE(Clock::now() - paused, 1400ms) << "set returned while etcd was stopped";
  EXPECT_EQ(other->add("n", 1), 2);
  EXPECT_EQ(other->get("k", 1s), "during");
  resumer.join();
  watcher.join();
  EXPECT_EQ(seen, "during");
}

// A wait shorter than the request timeout ends at its own timeout while etcd is stopped: a
// heartbeat's short wait must not stall for the store's 30 s.
TEST_F(EtcdStoreTest, AWaitOnAStoppedServerEndsAtItsOwnTimeout) {
  EtcdServer etcd;
  auto store = open(etcd.endpoint(), "30s");
  store->set("present", "1");
  etcd.pause();
  auto start = Clock::now();
  EXPECT_THROW((void)store->get("absent", 300ms), Timeout);
  EXPECT_GE(Clock::now() - start, 300ms);
  EXPECT_LT(Clock::now() - start, 1s + kSchedulingMargin);
  start = Clock::now();
  try {
    store->wait({"a", "b"}, 300ms);
    ADD_FAILURE() << "wait returned";
  } catch (const Timeout& e) {
    EXPECT_TRUE(contains(e.what(), "'a'") && contains(e.what(), "'b'")) << e.what();
  }
  EXPECT_LT(Clock::now() - start, 2s + kSchedulingMargin);
  start = Clock::now();
  EXPECT_THROW((void)store->wait_for_change("present", "1", 300ms), Timeout);
  EXPECT_LT(Clock::now() - start, 1s + kSchedulingMargin);
  etcd.resume();
  EXPECT_EQ(store->get("present", 0ms), "1");
}

// A remove (or add) that etcd received but did not answer within the timeout may have been
// applied: it is not sent again (a resent remove would report the key absent, a resent add
// count twice) and says its outcome is unknown. A set, which may be sent twice, fails as
// unreachable. Neither outlasts the timeout.
TEST_F(EtcdStoreTest, ARemoveUnansweredWithinTheTimeoutSaysItsOutcomeIsUnknown) {
  EtcdServer etcd;
  auto store = open(etcd.endpoint(), "500ms");
  store->set("n", "0");
  etcd.pause();
  auto start = Clock::now();
  try {
    (void)store->remove("n");
    ADD_FAILURE() << "remove returned with etcd stopped";
  } catch (const Error& e) {
    EXPECT_TRUE(contains(e.what(), "unknown")) << e.what();
    EXPECT_TRUE(contains(e.what(), etcd.endpoint())) << e.what();
  }
  EXPECT_LT(Clock::now() - start, 500ms + kSchedulingMargin);
  start = Clock::now();
  try {
    store->set("k", "v");
    ADD_FAILURE() << "set returned with etcd stopped";
  } catch (const Error& e) {
    EXPECT_TRUE(contains(e.what(), "store.etcd.endpoints")) << e.what();
  }
  EXPECT_LT(Clock::now() - start, 500ms + kSchedulingMargin);
  etcd.resume();
}

// etcd's shortest lease is 1.5 election timeouts rounded up to a second, and it silently
// lengthens a shorter one; the store refuses it instead, saying what etcd would grant.
TEST_F(EtcdStoreTest, ALeaseShorterThanTheServersMinimumIsInvalidArgumentNamingIt) {
  EtcdServer etcd({"--heartbeat-interval=100", "--election-timeout=1000"});  // etcd's defaults
  auto store = open(etcd.endpoint(), "10s");
  try {
    (void)store->grant_lease(1s);
    FAIL() << "granted a 1 s lease";
  } catch (const InvalidArgument& e) {
    EXPECT_TRUE(contains(e.what(), "shorter than 2 s")) << e.what();
  }
  EXPECT_NO_THROW(store->revoke_lease(store->grant_lease(2s)));
}

TEST_F(EtcdStoreTest, AKeyBoundToALeaseVanishesWhenEtcdExpiresIt) {
  EtcdServer etcd;
  auto store = open(etcd.endpoint(), "10s");
  const auto granted = Clock::now();
  const auto lease = store->grant_lease(1s);
  store->set("member", "here", lease);
  EXPECT_EQ(store->wait_for_change("member", "here", 30s), std::nullopt);
  const auto gone = Clock::now() - granted;
  EXPECT_GE(gone, 1s);
  EXPECT_LT(gone, 1s + store_test::lease_limits("etcd").expiry_slack + kSchedulingMargin);
}

TEST_F(EtcdStoreTest, AnEndpointThatIsNotHostPortIsAConfigErrorNamingTheOption) {
  for (const auto* endpoints :
       {"", "localhost", "https://127.0.0.1:2379", "127.0.0.1:99999", "127.0.0.1:2379,:"}) {
    try {
      (void)open(endpoints, "1s");
      ADD_FAILURE() << "accepted endpoints '" << endpoints << "'";
    } catch (const ConfigError& e) {
      EXPECT_TRUE(contains(e.what(), "store.etcd.endpoints")) << e.what();
    }
  }
  EXPECT_NO_THROW((void)open("http://127.0.0.1:2379/, [::1]:2379", "1s"));
}

}  // namespace
}  // namespace tessera
