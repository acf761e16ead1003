// Membership: workers agree, generation by generation, on who is in an elastic job's world,
// through the memory store; each worker is a thread with its own Membership, as each process
// would have.
//
// Timing: a loaded machine makes threads late, never early. Lower bounds are asserted exactly,
// upper bounds with kLate of room.
#include "tessera/elastic/membership.hpp"

#include <gtest/gtest.h>

#include <algorithm>
#include <functional>
#include <future>
#include <map>
#include <set>
#include <thread>

#include "membership_test_support.hpp"
#include "memory_store.hpp"
#include "tessera/base/error.hpp"

namespace tessera {
namespace {

using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;

constexpr auto kLate = 1500ms;

using membership_test::HeartbeatSwitchStore;
using membership_test::ProposalGate;

struct Job {
  MembershipOptions defaults;
  std::shared_ptr<Store> store = memory::make_memory_store();
  std::map<std::string, std::shared_ptr<HeartbeatSwitchStore>> views;
  std::map<std::string, std::unique_ptr<Membership>> workers;

  explicit Job(int min_workers, int max_workers, Duration settle_time = 300ms,
               Duration failure_timeout = 2000ms) {
    defaults.min_workers = min_workers;
    defaults.max_workers = max_workers;
    defaults.heartbeat = 20ms;
    defaults.failure_timeout = failure_timeout;
    defaults.settle_time = settle_time;
  }

  Membership& add(const std::string& id) {
    auto options = defaults;
    options.worker_id = id;
    auto view = std::make_shared<HeartbeatSwitchStore>(store);
    views[id] = view;
    return *(workers[id] = std::make_unique<Membership>(view, options));
  }
  Membership& operator[](const std::string& id) { return *workers.at(id); }
};

std::vector<WorldView> on_threads(Job& job, const std::vector<std::string>& ids,
                                  const std::function<WorldView(Membership&)>& call) {
  return membership_test::on_threads(
      ids, [&](const std::string& id) -> Membership& { return job[id]; }, call);
}

// The first world of `ids`: they all join at once and max_workers is their number.
std::vector<WorldView> form_first_world(Job& job, const std::vector<std::string>& ids) {
  for (const auto& id : ids) job.add(id);
  return on_threads(job, ids, [](Membership& m) { return m.join(deadline_after(10s)); });
}

std::function<WorldView(Membership&)> next_after(std::int64_t current,
                                                 std::vector<std::string> failed = {},
                                                 Duration timeout = 10s) {
  return [=](Membership& m) { return m.next_generation(current, failed, deadline_after(timeout)); };
}

// Waits (bounded) until `condition` holds; false if it never did.
bool eventually(const std::function<bool()>& condition, Duration timeout = 5s) {
  const auto until = Clock::now() + timeout;
  while (Clock::now() < until) {
    if (condition()) return true;
    std::this_thread::sleep_for(5ms);
  }
  return condition();
}

void expect_same_world(const std::vector<WorldView>& views) {
  for (const auto& view : views) {
    EXPECT_EQ(view.generation, views.front().generation);
    EXPECT_EQ(view.members, views.front().members);
    EXPECT_EQ(view.joined, views.front().joined);
  }
}

using Ids = std::vector<std::string>;

// `newcomer` joins while `members` run generation `current`, and they admit it at the next one
// (`failed`: members gone meanwhile). Returns the members' views, then the newcomer's, having
// checked that they are one world.
std::vector<WorldView> admit(Job& job, const std::string& newcomer, const Ids& members,
                             std::int64_t current, const Ids& failed = {}) {
  auto joining =
      std::async(std::launch::async, [&] { return job[newcomer].join(deadline_after(10s)); });
  EXPECT_TRUE(eventually([&] { return job[members.front()].joiners_waiting(current); }))
      << newcomer << " never showed as waiting to join";
  auto views = on_threads(job, members, next_after(current, failed));
  views.push_back(joining.get());
  expect_same_world(views);
  return views;
}

TEST(Membership, FirstWorldHoldsEveryoneInIdOrderOnceMaxWorkersAreReady) {
  Job job(1, 4, /*settle_time=*/2000ms);
  const auto started = Clock::now();
  const auto views = form_first_world(job, {"w3", "w1", "w0", "w2"});
  EXPECT_LT(Clock::now() - started, 2000ms) << "formed at max_workers, without settling";
  expect_same_world(views);
  EXPECT_EQ(views[0].generation, 1);
  EXPECT_EQ(views[0].members, (Ids{"w0", "w1", "w2", "w3"}));
  EXPECT_EQ(views[0].joined, views[0].members);
  EXPECT_EQ(views[0].rank, 3);
  EXPECT_EQ(views[1].rank, 1);
  EXPECT_EQ(views[2].rank, 0);
}

TEST(Membership, RacingProposalsYieldOneWorldPerGeneration) {
  // Each survivor calls all the others failed, so it proposes at once whatever is ready when it
  // looks: different workers propose different worlds at the same moment.
  const Ids ids = {"a", "b", "c", "d", "e", "f"};
  for (int round = 0; round < 25; ++round) {
    Job job(1, 6, /*settle_time=*/2000ms);  // the first world waits for all six
    form_first_world(job, ids);
    const auto gate = std::make_shared<ProposalGate>(static_cast<int>(ids.size()));
    for (auto& [id, view] : job.views) view->gate_world_writes(gate);
    const auto views = on_threads(job, ids, [&](Membership& m) {
      Ids others;
      for (const auto& id : ids) {
        if (id != m.worker_id()) others.push_back(id);
      }
      return m.next_generation(1, others, deadline_after(10s));
    });
    expect_same_world(views);
    const auto& members = views.front().members;
    ASSERT_FALSE(members.empty());
    for (std::size_t i = 0; i < ids.size(); ++i) {
      const auto it = std::find(members.begin(), members.end(), ids[i]);
      if (it == members.end()) {
        EXPECT_FALSE(views[i].is_member()) << ids[i] << " in round " << round;
      } else {
        EXPECT_EQ(views[i].rank, it - members.begin()) << ids[i] << " in round " << round;
      }
    }
    EXPECT_EQ(views.front().generation, 2);
    EXPECT_TRUE(views.front().joined.empty());
  }
}

TEST(Membership, ExpiredLeaseIsLeftOutAndItsHolderIsToldToRejoin) {
  Job job(1, 3, /*settle_time=*/1500ms, /*failure_timeout=*/1500ms);
  form_first_world(job, {"a", "b", "c"});
  job.views["c"]->hold_renewals(true);
  // c's lease runs out: its key goes, with no one naming c failed.
  EXPECT_EQ(job.store->wait_for_change("membership/workers/c", "alive", 10s), std::nullopt);

  const auto started = Clock::now();
  const auto views = on_threads(job, {"a", "b"}, next_after(1));
  EXPECT_LT(Clock::now() - started, 1000ms) << "a dead worker must not hold the others back";
  expect_same_world(views);
  EXPECT_EQ(views[0].members, (Ids{"a", "b"}));

  job.views["c"]->hold_renewals(false);
  EXPECT_TRUE(eventually([&] { return job["c"].lease_lost(); }));
  // The store answered at once: the lease ended for c's own silence, not the store's.
  EXPECT_EQ(job["c"].store_silence(), std::nullopt);
  EXPECT_THROW((void)job["c"].next_generation(1, {}, deadline_after(1s)), LeaseExpired);

  // It comes back as a newcomer.
  const auto c = admit(job, "c", {"a", "b"}, 2).back();
  EXPECT_EQ(c.generation, 3);
  EXPECT_EQ(c.members, (Ids{"a", "b", "c"}));
  EXPECT_EQ(c.joined, Ids{"c"});
  EXPECT_EQ(c.rank, 2);
}

// A worker stopped (SIGSTOP) past its lease and woken: its heartbeat has not run yet, so it has
// not heard that the others counted it gone. Before it acts as a member (its rank 0 writing a
// step's record into the job's metrics) it must learn it, not write into a run that went on
// without it.
TEST(Membership, AWorkerWokenAfterItsLeaseEndedLearnsItIsGoneBeforeItActs) {
  Job job(1, 3, /*settle_time=*/300ms, /*failure_timeout=*/1000ms);
  form_first_world(job, {"a", "b", "c"});
  EXPECT_NO_THROW(job["c"].confirm_lease()) << "renewed: alive";

  job.views["c"]->stall_renewals(true);
  EXPECT_EQ(job.store->wait_for_change("membership/workers/c", "alive", 10s), std::nullopt);
  EXPECT_FALSE(job["c"].lease_lost()) << "the stalled heartbeat has not heard";
  try {
    job["c"].confirm_lease();
    FAIL() << "a worker whose lease ended confirmed it";
  } catch (const LeaseExpired& e) {
    EXPECT_NE(std::string(e.what()).find("its registration was gone"), std::string::npos)
        << e.what();
  }
  EXPECT_TRUE(job["c"].lease_lost());
  EXPECT_NO_THROW(job["a"].confirm_lease()) << "the others' leases are renewed";
  job.views["c"]->stall_renewals(false);
}

// A store that stops answering (its server SIGSTOPped) for longer than the ttl: the worker's
// renewals fail meanwhile, and the first one answered finds the lease ended. That loss is the
// store's outage, and says so: the worker did nothing wrong, and a message that blamed it would
// send the operator to the wrong place.
TEST(Membership, ALeaseThatEndsWhileTheStoreDoesNotAnswerIsNamedTheStoresOutage) {
  Job job(1, 2, /*settle_time=*/300ms, /*failure_timeout=*/1000ms);
  form_first_world(job, {"a", "b"});
  job.views["a"]->fail_renewals(true);
  EXPECT_EQ(job.store->wait_for_change("membership/workers/a", "alive", 10s), std::nullopt);
  job.views["a"]->fail_renewals(false);
  ASSERT_TRUE(eventually([&] { return job["a"].lease_lost(); }));

  const auto silence = job["a"].store_silence();
  ASSERT_TRUE(silence.has_value());
  // From the last renewal answered to the one that found the lease ended: the ttl, less the
  // moment between the store's renewal and its answer.
  EXPECT_GE(*silence, 900ms);
  try {
    (void)job["a"].next_generation(1, {}, deadline_after(1s));
    FAIL() << "a worker whose lease ended went on";
  } catch (const LeaseExpired& e) {
    EXPECT_NE(std::string(e.what()).find("the job's store had not answered its renewals for "),
              std::string::npos)
        << e.what();
    EXPECT_NE(std::string(e.what()).find("longer than the lease's ttl (failure_timeout = 1000 ms)"),
              std::string::npos)
        << e.what();
  }
  // b's store answered all along.
  EXPECT_EQ(job["b"].store_silence(), std::nullopt);
}

TEST(Membership, SlowSurvivorFindsItselfLeftOutAndJoinsTheNextWorld) {
  Job job(1, 3, /*settle_time=*/300ms);
  form_first_world(job, {"a", "b", "c"});

  const auto started = Clock::now();
  const auto second = on_threads(job, {"a", "b"}, next_after(1));
  EXPECT_GE(Clock::now() - started, 300ms) << "c is alive: the others wait settle_time for it";
  EXPECT_EQ(second[0].members, (Ids{"a", "b"}));

  const auto late = job["c"].next_generation(1, {}, deadline_after(10s));
  EXPECT_EQ(late.generation, 2);
  EXPECT_EQ(late.members, (Ids{"a", "b"}));
  EXPECT_FALSE(late.is_member());

  const auto c = admit(job, "c", {"b", "a"}, 2).back();
  EXPECT_EQ(c.generation, 3);
  EXPECT_EQ(c.members, (Ids{"a", "b", "c"}));
  EXPECT_EQ(c.joined, Ids{"c"});
}

TEST(Membership, TwoFailuresAtOnceFormOneSmallerWorldWithoutWaiting) {
  Job job(1, 5, /*settle_time=*/1500ms);
  form_first_world(job, {"a", "b", "c", "d", "e"});
  job.views["d"]->hold_renewals(true);  // hung, their leases still alive
  job.views["e"]->hold_renewals(true);

  // Each survivor saw a different failure; naming them is enough not to wait for them.
  const auto started = Clock::now();
  const std::map<std::string, Ids> named = {
      {"a", {"d", "e"}}, {"b", {"d", "e"}}, {"c", {"e", "d"}}};
  const auto views = on_threads(job, {"a", "b", "c"}, [&](Membership& m) {
    return m.next_generation(1, named.at(m.worker_id()), deadline_after(10s));
  });
  EXPECT_LT(Clock::now() - started, 1000ms);
  expect_same_world(views);
  EXPECT_EQ(views[0].members, (Ids{"a", "b", "c"}));
  EXPECT_EQ(views[0].generation, 2);
  EXPECT_EQ(views[2].rank, 2);
}

TEST(Membership, MembersThatStopBeatingAreNotWaitedForThoughTheirLeasesLive) {
  // A node dies whole: nobody removes its workers' keys, and their leases run for
  // failure_timeout. The survivors wait regroup_silence for their beats, not settle_time.
  Job job(1, 4, /*settle_time=*/3000ms, /*failure_timeout=*/4000ms);
  const auto silence = regroup_silence(job.defaults);
  ASSERT_EQ(silence, 500ms) << "4 heartbeats of 20 ms, raised to the 500 ms floor";
  form_first_world(job, {"a", "b", "c", "d"});
  job.views["c"]->hold_renewals(true);
  job.views["d"]->hold_renewals(true);

  const auto started = Clock::now();
  const auto views = on_threads(job, {"a", "b"}, next_after(1));
  const auto took = Clock::now() - started;
  EXPECT_GE(took, silence) << "c and d are silent for regroup_silence before they are dropped";
  EXPECT_LT(took, 3000ms) << "not settle_time: c and d stopped beating";
  expect_same_world(views);
  EXPECT_EQ(views[0].members, (Ids{"a", "b"}));
  EXPECT_TRUE(job.store->check("membership/workers/c")) << "c's lease still runs";
}

TEST(Membership, SurvivorsKeepTheirOrderAndNewcomersFollowById) {
  Job job(1, 5);
  form_first_world(job, {"m", "n", "p"});
  auto& z = job.add("a-new");
  // "a-new" sorts first but enters after the survivors; m left, so n and p move up.
  const auto newcomer = admit(job, z.worker_id(), {"n", "p"}, 1, {"m"}).back();
  EXPECT_EQ(newcomer.members, (Ids{"n", "p", "a-new"}));
  EXPECT_EQ(newcomer.joined, Ids{"a-new"});
  EXPECT_EQ(newcomer.rank, 2);
}

TEST(Membership, JoinerIsAdmittedAtTheNextGeneration) {
  Job job(1, 3);
  form_first_world(job, {"a", "b"});
  EXPECT_FALSE(job["a"].joiners_waiting(1));

  auto& z = job.add("z");
  const auto views = admit(job, z.worker_id(), {"a", "b"}, 1);
  const auto& newcomer = views.back();
  EXPECT_EQ(newcomer.generation, 2);
  EXPECT_EQ(newcomer.members, (Ids{"a", "b", "z"}));
  EXPECT_EQ(newcomer.joined, Ids{"z"});
  EXPECT_EQ(views[0].rank, 0);
  EXPECT_EQ(views[1].rank, 1);
  EXPECT_EQ(newcomer.rank, 2);
}

TEST(Membership, NewcomersFormTheWorldWhenNoMemberIsLeft) {
  Job job(1, 2);
  form_first_world(job, {"a", "b"});
  job.workers.clear();  // both leave (their leases are revoked)
  job.add("y");
  job.add("z");
  const auto views =
      on_threads(job, {"y", "z"}, [](Membership& m) { return m.join(deadline_after(10s)); });
  expect_same_world(views);
  EXPECT_EQ(views[0].generation, 2);
  EXPECT_EQ(views[0].members, (Ids{"y", "z"}));
  EXPECT_EQ(views[0].joined, (Ids{"y", "z"})) << "nobody holds the old world's state";
}

TEST(Membership, AMemberMovesOnWithNextGenerationNotJoin) {
  Job job(1, 2);
  form_first_world(job, {"a", "b"});
  EXPECT_THROW((void)job["a"].join(deadline_after(1s)), InvalidArgument);
  auto& z = job.add("z");
  EXPECT_THROW((void)z.next_generation(1, {}, deadline_after(1s)), InvalidArgument);
}

TEST(Membership, MaxWorkersKeepsExtraJoinersWaitingUntilThereIsRoom) {
  Job job(1, 2, /*settle_time=*/2000ms);
  const Ids ids = {"a", "b", "c"};
  for (const auto& id : ids) job.add(id);
  std::vector<std::future<WorldView>> joins;
  for (const auto& id : ids) {
    joins.push_back(
        std::async(std::launch::async, [&, id] { return job[id].join(deadline_after(800ms)); }));
  }
  std::optional<WorldView> world;
  std::string left_out;
  for (std::size_t i = 0; i < ids.size(); ++i) {
    try {
      world = joins[i].get();
    } catch (const Timeout& error) {
      EXPECT_TRUE(left_out.empty()) << "only one is left out";
      left_out = ids[i];
      EXPECT_NE(std::string(error.what()).find("max_workers = 2"), std::string::npos)
          << error.what();
      EXPECT_NE(std::string(error.what()).find("--max-workers"), std::string::npos) << error.what();
    }
  }
  ASSERT_TRUE(world.has_value());
  ASSERT_FALSE(left_out.empty());
  EXPECT_EQ(world->size(), 2);
  const auto member = world->members[0];
  const auto other = world->members[1];

  // Waiting again: a full world does not call it in, a smaller one does.
  auto retry =
      std::async(std::launch::async, [&] { return job[left_out].join(deadline_after(10s)); });
  ASSERT_TRUE(eventually([&] { return job.store->check("membership/ready/2/" + left_out); }));
  EXPECT_FALSE(job[member].joiners_waiting(1));
  const auto second = job[member].next_generation(1, {other}, deadline_after(10s));
  const auto admitted = retry.get();
  expect_same_world({second, admitted});
  EXPECT_EQ(admitted.members, (Ids{member, left_out}));
}

// Every joiner is ready before the members regroup, so the cap decides who is in, not the
// order in which the joins arrive: newcomers enter by id up to max_workers, and the one past it
// keeps waiting and is told why at its deadline.
TEST(Membership, NewcomersPastMaxWorkersAreLeftWaitingWhenTheMembersRegroup) {
  Job job(1, 3);
  form_first_world(job, {"a", "b"});
  job.add("y");
  job.add("z");
  auto y = std::async(std::launch::async, [&] { return job["y"].join(deadline_after(10s)); });
  auto z = std::async(std::launch::async, [&] { return job["z"].join(deadline_after(2s)); });
  ASSERT_TRUE(eventually([&] {
    return job.store->check("membership/ready/2/y") && job.store->check("membership/ready/2/z");
  }));
  const auto views = on_threads(job, {"a", "b"}, next_after(1));
  EXPECT_EQ(views[0].members, (Ids{"a", "b", "y"}));
  EXPECT_EQ(views[0].joined, Ids{"y"});
  expect_same_world({views[0], views[1], y.get()});
  try {
    const auto admitted = z.get();
    ADD_FAILURE() << "z was admitted past max_workers = 3, into a world of "
                  << admitted.members.size();
  } catch (const Timeout& error) {
    EXPECT_NE(std::string(error.what()).find("max_workers = 3"), std::string::npos) << error.what();
  }
}

TEST(Membership, BelowMinWorkersTimesOutNamingTheOption) {
  Job job(3, 3);
  form_first_world(job, {"a", "b", "c"});
  const auto started = Clock::now();
  std::vector<std::future<void>> survivors;
  for (const std::string id : {"a", "b"}) {
    survivors.push_back(std::async(std::launch::async, [&, id] {
      try {
        (void)job[id].next_generation(1, {"c"}, deadline_after(400ms));
        ADD_FAILURE() << id << " formed a world below min_workers";
      } catch (const Timeout& error) {
        const std::string message = error.what();
        EXPECT_NE(message.find("min_workers = 3"), std::string::npos) << message;
        EXPECT_NE(message.find("only 2 worker(s) are ready (a, b"), std::string::npos) << message;
        EXPECT_NE(message.find("--min-workers"), std::string::npos) << message;
      }
    }));
  }
  for (auto& survivor : survivors) survivor.get();
  const auto elapsed = Clock::now() - started;
  EXPECT_GE(elapsed, 400ms);
  EXPECT_LT(elapsed, 400ms + kLate);
}

TEST(Membership, BelowMinWorkersTheReadySurvivorsFormOneStoppingWorldAtTheDeadline) {
  Job job(3, 3);
  form_first_world(job, {"a", "b", "c"});
  const auto started = Clock::now();
  const auto views = on_threads(job, {"a", "b"}, [](Membership& m) {
    return m.next_generation(1, {"c"}, deadline_after(400ms), BelowMinWorkers::stop);
  });
  EXPECT_GE(Clock::now() - started, 400ms);
  expect_same_world(views);
  EXPECT_EQ(views[0].generation, 2);
  EXPECT_EQ(views[0].members, (Ids{"a", "b"}));
  EXPECT_TRUE(views[0].joined.empty());
  for (const auto& view : views) EXPECT_TRUE(view.stopping);
  EXPECT_EQ(views[0].rank, 0);
  EXPECT_EQ(views[1].rank, 1);
  // Nobody is admitted after it: a newcomer learns that the job stopped, at once.
  const auto late = job.add("z").join(deadline_after(10s));
  EXPECT_TRUE(late.stopping);
  EXPECT_FALSE(late.is_member());
  EXPECT_EQ(late.generation, 2);
}

TEST(Membership, BelowMinWorkersAJoinerCompletesTheWorld) {
  Job job(3, 3);
  form_first_world(job, {"a", "b", "c"});
  auto survivors = std::async(std::launch::async, [&] {
    return on_threads(job, {"a", "b"}, next_after(1, {"c"}));
  });
  // The survivors are waiting below min_workers (both said they are ready for generation 2)
  // before the newcomer comes: it completes their world, it does not find one formed.
  ASSERT_TRUE(eventually([&] {
    return job.store->check("membership/ready/2/a") && job.store->check("membership/ready/2/b");
  })) << "the survivors never got ready for generation 2";
  const auto newcomer = job.add("z").join(deadline_after(10s));
  const auto views = survivors.get();
  expect_same_world({views[0], views[1], newcomer});
  EXPECT_EQ(newcomer.members, (Ids{"a", "b", "z"}));
}

TEST(Membership, NoWaitOutlastsItsDeadline) {
  {  // alone, below min_workers
    Job job(2, 2);
    const auto started = Clock::now();
    EXPECT_THROW((void)job.add("a").join(deadline_after(300ms)), Timeout);
    EXPECT_GE(Clock::now() - started, 300ms);
    EXPECT_LT(Clock::now() - started, 300ms + kLate);
  }
  {  // a newcomer whose running world never reaches a step boundary
    Job job(1, 3);
    form_first_world(job, {"a", "b"});
    const auto started = Clock::now();
    try {
      (void)job.add("z").join(deadline_after(300ms));
      ADD_FAILURE() << "admitted with no world formed";
    } catch (const Timeout& error) {
      EXPECT_NE(std::string(error.what()).find("'z' was not admitted"), std::string::npos)
          << error.what();
      EXPECT_NE(std::string(error.what()).find("joiners_waiting"), std::string::npos)
          << error.what();
    }
    EXPECT_GE(Clock::now() - started, 300ms);
    EXPECT_LT(Clock::now() - started, 300ms + kLate);
    // It gave up: its ready mark is gone, so the members do not form a world for it.
    EXPECT_FALSE(job["a"].joiners_waiting(1));
  }
}

TEST(Membership, RefusesOptionsItCannotHonour) {
  const auto make = [](const std::function<void(MembershipOptions&)>& change) {
    MembershipOptions options;
    options.worker_id = "w0";
    change(options);
    return Membership(memory::make_memory_store(), options);
  };
  EXPECT_NO_THROW(make([](MembershipOptions&) {}));
  EXPECT_THROW(make([](MembershipOptions& o) { o.worker_id = "a/b"; }), InvalidArgument);
  EXPECT_THROW(make([](MembershipOptions& o) { o.worker_id = ""; }), InvalidArgument);
  EXPECT_THROW(make([](MembershipOptions& o) { o.min_workers = 0; }), InvalidArgument);
  EXPECT_THROW(make([](MembershipOptions& o) { o.min_workers = 3; }), InvalidArgument);
  EXPECT_THROW(make([](MembershipOptions& o) { o.heartbeat = o.failure_timeout; }),
               InvalidArgument);
  EXPECT_THROW(make([](MembershipOptions& o) { o.settle_time = o.failure_timeout + 1ms; }),
               InvalidArgument);
}

TEST(Membership, TwoLiveWorkersCannotShareAnId) {
  Job job(1, 2);
  form_first_world(job, {"a"});
  auto options = job.defaults;
  options.worker_id = "a";
  Membership twin(job.store, options);
  EXPECT_THROW((void)twin.join(deadline_after(1s)), InvalidArgument);
}

}  // namespace
}  // namespace tessera
