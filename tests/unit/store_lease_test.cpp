// What elastic worlds need from every store: leases, watches (wait_for_change) and listing by
// prefix, run over the memory, tcp, file and etcd stores. Leases use ttls on each store's grid
// and its expiry slack (lease_limits in store_contract.hpp): the contract's 1 ms and
// kLeaseExpirySlack, etcd's whole seconds and 1 s.
//
// Timing: on a loaded machine a thread may sleep far longer than it asked, never shorter. So
// lower bounds ("still there before ttl") are asserted only for what a test measured to have
// happened in time, and upper bounds ("gone after ttl + slack") are checked with calls made
// after at least that long, or with a wide margin where a wake-up is timed.
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <thread>
#include <vector>

#include "blocked_call.hpp"
#include "store_contract.hpp"
#include "tessera/base/error.hpp"

namespace tessera {
namespace {

using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;

// Scheduling delays a loaded 2-core machine may add to a wake-up the store promises on time.
constexpr auto kSchedulingMargin = 3s;

class StoreLeases : public store_test::StoreContract {};

TEST_P(StoreLeases, ALeasedKeyVanishesAfterItsTtlWithoutKeepAlive) {
  const auto ttl = lease_ttl(300ms);
  auto other = client();
  const auto before_grant = Clock::now();
  const auto lease = first_->grant_lease(ttl);
  first_->set("member/a", "alive", lease);
  const bool seen = other->check("member/a");
  if (Clock::now() - before_grant < ttl) {
    EXPECT_TRUE(seen);
  }
  const auto granted = Clock::now();

  // Watched from another client: the watch wakes on the expiry itself.
  const auto after = other->wait_for_change("member/a", "alive", ttl + 10s);
  const auto woke = Clock::now();
  EXPECT_EQ(after, std::nullopt);
  EXPECT_GE(woke - before_grant, ttl);
  EXPECT_LT(woke - granted, ttl + lease_expiry_slack() + kSchedulingMargin);

  // The contract's bound, for calls that start late enough.
  std::this_thread::sleep_until(granted + ttl + lease_expiry_slack());
  EXPECT_FALSE(first_->check("member/a"));
  EXPECT_FALSE(other->check("member/a"));
  EXPECT_TRUE(other->list("member/").empty());
  EXPECT_THROW((void)other->get("member/a", 10ms), Timeout);
}

TEST_P(StoreLeases, KeepAliveKeepsALeasedKeyPastManyTtls) {
  const auto ttl = lease_ttl(1000ms);
  auto other = client();
  auto last_renewal = Clock::now();
  const auto lease = first_->grant_lease(ttl);
  first_->set("member/a", "alive", lease);
  const auto until = Clock::now() + 3 * ttl;
  int renewals = 0;
  while (Clock::now() < until) {
    std::this_thread::sleep_for(100ms);  // the renewals' pace, the thing under test
    const auto renewal = Clock::now();
    if (renewal - last_renewal >= ttl)
      GTEST_SKIP() << "this thread slept " << (renewal - last_renewal) / 1ms
                   << " ms between renewals, past the ttl: the machine is too loaded";
    ASSERT_NO_THROW(first_->keep_alive(lease)) << "after " << renewals << " renewals";
    last_renewal = renewal;
    ++renewals;
    const bool present = other->check("member/a");
    if (Clock::now() - renewal < ttl) {
      EXPECT_TRUE(present) << "after " << renewals << " renewals";
    }
  }
  EXPECT_EQ(other->get("member/a", 0ms), "alive");
}

TEST_P(StoreLeases, RevokeDeletesTheKeysAtOnceAndWakesTheirWatchers) {
  auto other = client();
  const auto lease = first_->grant_lease(60s);
  first_->set("gen/1/a", "x", lease);
  first_->set("gen/1/b", "y", lease);
  first_->set("gen/1/kept", "z");
  std::optional<std::string> seen = "unset";
  testing::BlockedCall watch;
  std::thread watcher([&, watcher_store = client()] {
    watch.entering();
    seen = watcher_store->wait_for_change("gen/1/a", "x", 30s);
    watch.returned();
  });
  if (!watch.wait_until_blocked()) {
    watcher.join();
    FAIL() << "the watcher returned before the revoke";
  }
  const auto start = Clock::now();
  other->revoke_lease(lease);
  watcher.join();
  EXPECT_LT(Clock::now() - start, kSchedulingMargin);
  EXPECT_EQ(seen, std::nullopt);
  EXPECT_FALSE(first_->check("gen/1/a"));
  EXPECT_FALSE(first_->check("gen/1/b"));
  EXPECT_EQ(first_->get("gen/1/kept", 0ms), "z");
  EXPECT_NO_THROW(first_->revoke_lease(lease));  // ended already: nothing to do
  EXPECT_THROW(first_->keep_alive(lease), LeaseExpired);
}

TEST_P(StoreLeases, KeepAliveOrSetAfterExpiryThrowsLeaseExpiredAndWritesNothing) {
  const auto ttl = lease_ttl(50ms);
  const auto lease = first_->grant_lease(ttl);
  first_->set("k", "v", lease);
  std::this_thread::sleep_for(ttl + lease_expiry_slack());  // the lease's end, unrenewed
  try {
    first_->keep_alive(lease);
    FAIL() << "keep_alive renewed an expired lease";
  } catch (const LeaseExpired& e) {
    EXPECT_EQ(e.lease(), lease);
    EXPECT_NE(std::string(e.what()).find("new lease"), std::string::npos) << e.what();
  }
  EXPECT_THROW(client()->set("k2", "v", lease), LeaseExpired);
  EXPECT_FALSE(first_->check("k"));
  EXPECT_FALSE(first_->check("k2"));
  EXPECT_THROW(first_->keep_alive(LeaseId{}), LeaseExpired);  // never granted
}

TEST_P(StoreLeases, APlainSetUnbindsAKeyWhileAddAndCompareSetKeepItsLease) {
  const auto lease = first_->grant_lease(60s);
  first_->set("unbound", "1", lease);
  first_->set("unbound", "2");
  first_->set("counter", "1", lease);
  EXPECT_EQ(first_->add("counter", 1), 2);
  first_->set("leader", "a", lease);
  EXPECT_EQ(first_->compare_set("leader", "a", "b"), "b");
  first_->revoke_lease(lease);
  EXPECT_EQ(first_->get("unbound", 0ms), "2");
  EXPECT_FALSE(first_->check("counter"));
  EXPECT_FALSE(first_->check("leader"));
}

TEST_P(StoreLeases, LeasesKeepTheirOwnKeys) {
  const auto one = first_->grant_lease(60s);
  const auto two = client()->grant_lease(60s);
  EXPECT_NE(one, two);
  first_->set("member/1", "a", one);
  first_->set("member/2", "b", two);
  first_->revoke_lease(one);
  EXPECT_FALSE(first_->check("member/1"));
  EXPECT_EQ(first_->get("member/2", 0ms), "b");
  first_->keep_alive(two);
}

TEST_P(StoreLeases, ALeaseOutsideOneMillisecondToThirtyDaysIsInvalidArgument) {
  EXPECT_THROW((void)first_->grant_lease(0ms), InvalidArgument);
  EXPECT_THROW((void)first_->grant_lease(-5ms), InvalidArgument);
  EXPECT_THROW((void)first_->grant_lease(kMaxStoreDuration + 1ms), InvalidArgument);
  EXPECT_NO_THROW(first_->revoke_lease(first_->grant_lease(kMaxStoreDuration)));
}

// A store with a coarser grid than 1 ms (etcd: whole seconds) refuses a ttl off it, saying so,
// rather than granting a longer or shorter lease than asked.
TEST_P(StoreLeases, ATtlOffTheStoresGridIsInvalidArgumentNamingTheTtl) {
  const auto step = lease_granularity();
  EXPECT_NO_THROW(first_->revoke_lease(first_->grant_lease(2 * step)));
  if (step == 1ms) return;  // every whole number of milliseconds is on the grid
  for (const auto off_grid : {step + step / 2, step / 2}) {
    try {
      first_->revoke_lease(first_->grant_lease(off_grid));
      ADD_FAILURE() << "granted a lease of " << off_grid.count() << " ms";
    } catch (const InvalidArgument& e) {
      EXPECT_NE(std::string(e.what()).find(std::to_string(off_grid.count()) + " ms"),
                std::string::npos)
          << e.what();
    }
  }
}

TEST_P(StoreLeases, WaitForChangeWakesOnASetFromAnotherClient) {
  first_->set("epoch", "1");
  testing::BlockedCall watch;
  std::thread setter([&, other = client()] {
    EXPECT_TRUE(watch.wait_until_blocked()) << "the watch returned before the value changed";
    other->set("epoch", "2");
  });
  watch.entering();
  EXPECT_EQ(first_->wait_for_change("epoch", "1", 30s), "2");
  watch.returned();
  setter.join();
}

TEST_P(StoreLeases, WaitForChangeWakesWhenAnAbsentKeyAppearsOrAPresentOneIsRemoved) {
  testing::BlockedCall appear;
  std::thread writer([&, other = client()] {
    EXPECT_TRUE(appear.wait_until_blocked()) << "the watch of the absent key did not wait";
    other->set("k", "");  // empty, but present: differs from absent
  });
  appear.entering();
  EXPECT_EQ(first_->wait_for_change("k", std::nullopt, 30s), "");
  appear.returned();
  writer.join();
  testing::BlockedCall vanish;
  std::thread remover([&, other = client()] {
    EXPECT_TRUE(vanish.wait_until_blocked()) << "the watch of the present key did not wait";
    other->remove("k");
  });
  vanish.entering();
  EXPECT_EQ(first_->wait_for_change("k", "", 30s), std::nullopt);
  vanish.returned();
  remover.join();
}

TEST_P(StoreLeases, WaitForChangeReturnsAtOnceWhenTheValueDiffersAlready) {
  first_->set("k", "new");
  const auto start = Clock::now();
  EXPECT_EQ(first_->wait_for_change("k", "old", 30s), "new");
  EXPECT_EQ(first_->wait_for_change("k", std::nullopt, 30s), "new");
  EXPECT_EQ(first_->wait_for_change("absent", "old", 30s), std::nullopt);
  EXPECT_LT(Clock::now() - start, kSchedulingMargin);
}

TEST_P(StoreLeases, WaitForChangeTimesOutNamingTheKeyWhenNothingChanges) {
  first_->set("k", "same");
  std::thread rewriter([other = client()] { other->set("k", "same"); });  // no change
  const auto start = Clock::now();
  try {
    (void)first_->wait_for_change("k", "same", 200ms);
    FAIL() << "wait_for_change returned";
  } catch (const Timeout& e) {
    EXPECT_NE(std::string(e.what()).find("'k'"), std::string::npos) << e.what();
  }
  const auto took = Clock::now() - start;
  EXPECT_GE(took, 200ms);
  EXPECT_LT(took, 200ms + kSchedulingMargin);
  rewriter.join();
  EXPECT_THROW((void)first_->wait_for_change("absent", std::nullopt, 10ms), Timeout);
}

// A watcher sleeps in the kernel: the memory store's condition variable, the tcp server's
// poll(). Counted in voluntary context switches, which a loaded machine does not inflate: a
// poll loop makes one per poll.
TEST_P(StoreLeases, AWatcherDoesNotPoll) {
  if (GetParam() == "file") GTEST_SKIP() << "the file store polls by design (its README)";
  first_->set("k", "v");
  rusage before{};
  rusage after{};
  ::getrusage(RUSAGE_SELF, &before);
  EXPECT_THROW((void)first_->wait_for_change("k", "v", 1s), Timeout);
  ::getrusage(RUSAGE_SELF, &after);
  EXPECT_LT(after.ru_nvcsw - before.ru_nvcsw, 20)
      << "context switches while one watcher waited for 1 s";
}

TEST_P(StoreLeases, ListReturnsTheKeysUnderAPrefixSortedWithTheirValues) {
  auto other = client();
  first_->set("gen/1/b", "B");
  first_->set("gen/1/a", "A");
  first_->set(std::string("gen/1/\xff\0", 8), "binary key");
  first_->set("gen/10/x", "X");
  first_->set("gen/2/c", "C");
  first_->set("gen", "root");
  const auto lease = first_->grant_lease(60s);
  first_->set("gen/1/leased", "L", lease);
  using List = std::vector<std::pair<std::string, std::string>>;
  EXPECT_EQ(other->list("gen/1/"), (List{{"gen/1/a", "A"},
                                         {"gen/1/b", "B"},
                                         {"gen/1/leased", "L"},
                                         {std::string("gen/1/\xff\0", 8), "binary key"}}));
  EXPECT_EQ(other->list("gen/1"), (List{{"gen/1/a", "A"},
                                        {"gen/1/b", "B"},
                                        {"gen/1/leased", "L"},
                                        {std::string("gen/1/\xff\0", 8), "binary key"},
                                        {"gen/10/x", "X"}}));
  EXPECT_EQ(other->list("").size(), 7U);
  EXPECT_TRUE(other->list("gen/3").empty());
  first_->revoke_lease(lease);
  EXPECT_EQ(other->list("gen/1/").size(), 3U);
}

TEST_P(StoreLeases, PrefixStoreForwardsLeasesWatchesAndListsWithoutItsPrefix) {
  PrefixStore job("job", client());
  PrefixStore neighbour("jobx", client());
  neighbour.set("gen/1/z", "not ours");
  const auto lease = job.grant_lease(60s);
  job.set("gen/1/a", "A", lease);
  job.set("gen/1/b", "B");
  using List = std::vector<std::pair<std::string, std::string>>;
  EXPECT_EQ(job.list("gen/"), (List{{"gen/1/a", "A"}, {"gen/1/b", "B"}}));
  EXPECT_EQ(first_->get("job/gen/1/a", 0ms), "A");
  testing::BlockedCall watch;
  std::thread writer([&] {
    EXPECT_TRUE(watch.wait_until_blocked()) << "the prefixed watch did not wait";
    PrefixStore(std::string("job"), client()).set("gen/1/b", "B2");
  });
  watch.entering();
  EXPECT_EQ(job.wait_for_change("gen/1/b", "B", 30s), "B2");
  watch.returned();
  writer.join();
  job.keep_alive(lease);
  job.revoke_lease(lease);
  EXPECT_FALSE(first_->check("job/gen/1/a"));
  EXPECT_EQ(job.list("gen/"), (List{{"gen/1/b", "B2"}}));
}

// Writers bump a counter from several threads while watchers follow it: every watcher sees
// the count only grow and reaches the final count; no increment is lost.
TEST_P(StoreLeases, ConcurrentWritersAndWatchersAgreeOnTheFinalValue) {
  constexpr int kWriters = 3;
  constexpr int kAddsEach = 30;
  constexpr int kWatchers = 3;
  constexpr auto kFinal = kWriters * kAddsEach;
  first_->set("count", "0");
  std::atomic<int> failures{0};
  std::vector<std::thread> threads;
  for (int w = 0; w < kWatchers; ++w) {
    threads.emplace_back([&, store = client()] {
      std::optional<std::string> seen = "0";
      int last = 0;
      while (last < kFinal) {
        try {
          seen = store->wait_for_change("count", seen, 60s);
        } catch (const Error&) {
          ++failures;
          return;
        }
        const int now = seen ? std::stoi(*seen) : -1;
        if (now <= last) ++failures;  // a change that is not an increase
        last = now;
      }
    });
  }
  for (int w = 0; w < kWriters; ++w) {
    threads.emplace_back([&, store = client()] {
      for (int i = 0; i < kAddsEach; ++i) store->add("count", 1);
    });
  }
  for (auto& t : threads) t.join();
  EXPECT_EQ(failures, 0);
  EXPECT_EQ(first_->get("count", 0ms), std::to_string(kFinal));
}

// The elastic case: a member process dies without a word; its lease runs out, and a survivor
// watching its key learns of it. While the member lives, its keep-alives hold the key.
TEST_P(StoreLeases, AMemberProcessThatIsKilledLosesItsKeysAfterItsTtl) {
  if (!crosses_processes()) GTEST_SKIP() << "the memory store lives in one process";
  const auto ttl = lease_ttl(1000ms);
  int ready[2];
  ASSERT_EQ(::pipe(ready), 0);
  const pid_t member = ::fork();
  ASSERT_GE(member, 0);
  if (member == 0) {
    ::close(ready[0]);
    try {
      auto own = client();
      const auto lease = own->grant_lease(ttl);
      own->set("members/child", "here", lease);
      const char ok = 'y';
      (void)!::write(ready[1], &ok, 1);
      for (;;) {  // until killed; the keep-alives' pace is the thing under test
        std::this_thread::sleep_for(50ms);
        own->keep_alive(lease);
      }
    } catch (...) {
      ::_exit(1);
    }
  }
  ::close(ready[1]);
  char ok = 0;
  ASSERT_EQ(::read(ready[0], &ok, 1), 1) << "the member process failed before joining";
  ::close(ready[0]);
  std::this_thread::sleep_for(2 * ttl);  // two ttls: held by the member's keep-alives only
  EXPECT_EQ(first_->get("members/child", 0ms), "here");
  ASSERT_EQ(::kill(member, SIGKILL), 0);
  const auto killed = Clock::now();
  int status = 0;
  ASSERT_EQ(::waitpid(member, &status, 0), member);
  EXPECT_TRUE(WIFSIGNALED(status)) << "the member process stopped by itself";
  EXPECT_EQ(first_->wait_for_change("members/child", "here", ttl + 30s), std::nullopt);
  EXPECT_LT(Clock::now() - killed, ttl + lease_expiry_slack() + kSchedulingMargin);
}

INSTANTIATE_TEST_SUITE_P(EveryStore, StoreLeases,
                         ::testing::Values("memory", "tcp", "file", "etcd"),
                         store_test::store_param_name);

}  // namespace
}  // namespace tessera
