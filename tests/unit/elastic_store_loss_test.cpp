// An elastic worker whose job's store is lost: once the store has given no answer for longer
// than a worker's lease, every lease in it has ended, and the worker's way out (the watcher's
// look at the members, the regroup, the lease's revocation) must not spend the store's own
// timeout once per request (issue 27: an etcd SIGKILLed mid-run held a worker past 60 s).
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <memory>
#include <string>
#include <thread>

#include "ddp_test_support.hpp"
#include "etcd_server.hpp"
#include "fail_fast_store.hpp"
#include "memory_store.hpp"
#include "tessera/base/error.hpp"
#include "tessera/elastic/elastic_world.hpp"
#include "tessera/registry/registry.hpp"

namespace tessera {
namespace {

using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;
using elastic::FailFastStore;

// A store whose server can be taken away: while it is out, every request waits `delay` (a client
// retrying, as the etcd store does until its timeout) and then fails for lack of an answer.
class OutageStore final : public Store {
 public:
  explicit OutageStore(Duration delay) : delay_(delay) {}
  void take_out(bool out) { out_.store(out); }
  [[nodiscard]] int requests() const { return requests_.load(); }

  void set(const std::string& k, const std::string& v) override {
    reach();
    inner_->set(k, v);
  }
  void set(const std::string& k, const std::string& v, LeaseId l) override {
    reach();
    inner_->set(k, v, l);
  }
  std::string get(const std::string& k, Duration t) override {
    reach();
    return inner_->get(k, t);
  }
  std::int64_t add(const std::string& k, std::int64_t d) override {
    reach();
    return inner_->add(k, d);
  }
  std::string compare_set(const std::string& k, const std::string& e,
                          const std::string& d) override {
    reach();
    return inner_->compare_set(k, e, d);
  }
  void wait(const std::vector<std::string>& k, Duration t) override {
    reach();
    inner_->wait(k, t);
  }
  std::optional<std::string> wait_for_change(const std::string& k,
                                             const std::optional<std::string>& known,
                                             Duration t) override {
    reach();
    return inner_->wait_for_change(k, known, t);
  }
  std::vector<std::pair<std::string, std::string>> list(const std::string& p) override {
    reach();
    return inner_->list(p);
  }
  bool check(const std::string& k) override {
    reach();
    return inner_->check(k);
  }
  bool remove(const std::string& k) override {
    reach();
    return inner_->remove(k);
  }
  LeaseId grant_lease(Duration ttl) override {
    reach();
    return inner_->grant_lease(ttl);
  }
  void keep_alive(LeaseId l) override {
    reach();
    inner_->keep_alive(l);
  }
  void revoke_lease(LeaseId l) override {
    reach();
    inner_->revoke_lease(l);
  }

 private:
  void reach() {
    ++requests_;
    if (!out_.load()) return;
    // The client's retries against a server that is gone: the request's whole timeout.
    std::this_thread::sleep_for(delay_);
    throw Error("outage store: no answer within " + std::to_string(delay_.count()) + " ms");
  }

  std::shared_ptr<Store> inner_ = memory::make_memory_store();
  Duration delay_;
  std::atomic<bool> out_{false};
  std::atomic<int> requests_{0};
};

TEST(FailFastStore, GivesUpOnAStoreSilentForLongerThanALeaseAndAsksItNothingMore) {
  const auto inner = std::make_shared<OutageStore>(400ms);
  FailFastStore store(inner, 300ms);
  store.set("a", "1");
  inner->take_out(true);
  EXPECT_THROW((void)store.list(""), Error);  // 400 ms without an answer: past the lease
  ASSERT_TRUE(store.given_up_after().has_value());
  EXPECT_GE(*store.given_up_after(), 300ms);

  // Even once the store answers again: every lease in it ended, this worker's too.
  inner->take_out(false);
  const int asked = inner->requests();
  const auto started = Clock::now();
  try {
    (void)store.check("a");
    ADD_FAILURE() << "a store given up on was asked again";
  } catch (const Error& e) {
    const std::string message = e.what();
    EXPECT_NE(message.find("the job's store gave no answer for "), std::string::npos) << message;
    EXPECT_NE(message.find("longer than a worker's lease (failure_timeout = 300 ms)"),
              std::string::npos)
        << message;
    EXPECT_NE(message.find("outage store: no answer within 400 ms"), std::string::npos) << message;
  }
  EXPECT_THROW(store.revoke_lease(LeaseId{7}), Error);
  EXPECT_LT(Clock::now() - started, 100ms);
  EXPECT_EQ(inner->requests(), asked);
}

TEST(FailFastStore, RidesOutAnOutageShorterThanALease) {
  const auto inner = std::make_shared<OutageStore>(50ms);
  FailFastStore store(inner, 5000ms);
  store.set("a", "1");
  inner->take_out(true);
  EXPECT_THROW((void)store.list(""), Error);
  EXPECT_FALSE(store.given_up_after().has_value());
  inner->take_out(false);
  EXPECT_TRUE(store.check("a"));
  EXPECT_EQ(store.get("a", 1000ms), "1");
}

// A wait that ends at its own timeout is no failure of the store: a worker that waited on a key
// longer than a lease (a newcomer waiting to be admitted) goes on asking.
TEST(FailFastStore, AWaitThatTimesOutIsNoOutage) {
  const auto inner = std::make_shared<OutageStore>(50ms);
  FailFastStore store(inner, 200ms);
  EXPECT_THROW((void)store.get("absent", 300ms), Timeout);
  EXPECT_THROW(store.keep_alive(LeaseId{12345}), LeaseExpired);  // an answer, if not a good one
  store.set("a", "1");
  EXPECT_TRUE(store.check("a"));
  EXPECT_FALSE(store.given_up_after().has_value());
}

std::shared_ptr<Store> etcd_store(const store_test::EtcdServer& etcd, const std::string& timeout) {
  const auto& registry = testing::test_registry();
  const auto defaults = registry.default_options(PluginKind::store, "etcd");
  auto values = defaults.values();
  values["endpoints"] = etcd.endpoint();
  values["prefix"] = "tessera_test/store_loss/" + std::to_string(::getpid()) + "/";
  values["timeout"] = timeout;
  return registry.create<Store>("etcd", Options(defaults.section(), defaults.specs(), values));
}

std::shared_ptr<Transport> local_transport() {
  const auto& registry = testing::test_registry();
  return registry.create<Transport>("local",
                                    registry.default_options(PluginKind::transport, "local"));
}

// etcd SIGKILLed under a running worker: its watcher, its regroup and its lease's revocation each
// ask etcd, and each request retries for the store's timeout. From the first that fails the
// worker asks no more, so the whole way out, from the kill to the worker's objects gone, takes
// one store timeout and a little, not one per request (it took three and more before).
TEST(ElasticStoreLoss, AWorkerThatLostItsEtcdIsOutWithinOneStoreTimeout) {
  store_test::EtcdServer etcd;
  constexpr auto kStoreTimeout = 3s;
  ElasticOptions options;
  options.min_workers = 1;
  options.max_workers = 1;
  options.heartbeat = Duration(100);
  options.failure_timeout = Duration(1000);  // etcd's shortest lease with the test server's flags
  options.join_timeout = Duration(1000);
  auto world = make_elastic_world(local_transport(), etcd_store(etcd, "3s"), options, "w0",
                                  testing::kTestTimeout);
  const auto entered = world->enter(deadline_after(20s));
  ASSERT_NE(entered.world, nullptr);

  etcd.kill_now();
  const auto killed = Clock::now();
  try {
    (void)world->regroup("test: a collective failed", deadline_after(20s));
    ADD_FAILURE() << "regrouped without a store";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find(etcd.endpoint()), std::string::npos) << e.what();
  }
  // The run's failure is the store's outage, past the leases: what `tessera train` names.
  EXPECT_TRUE(world->store_silence().has_value());
  world.reset();
  const auto out = Clock::now() - killed;
  EXPECT_LT(out, kStoreTimeout + 2s)
      << std::chrono::duration_cast<Duration>(out).count() << " ms from the kill to the way out";
}

}  // namespace
}  // namespace tessera
