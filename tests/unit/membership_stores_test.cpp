// Membership over every store plugin (memory, tcp, file, etcd): each worker has its own client,
// as each process of a job would. The protocol itself is specified over the memory store in
// membership_test.cpp; this checks that it needs nothing beyond the Store contract, with each
// store's lease grid and expiry slack.
#include <gtest/gtest.h>

#include <algorithm>
#include <functional>
#include <map>
#include <optional>
#include <thread>
#include <vector>

#include "membership_test_support.hpp"
#include "store_contract.hpp"
#include "tessera/base/error.hpp"
#include "tessera/elastic/membership.hpp"

namespace tessera {
namespace {

using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;
using Ids = std::vector<std::string>;

class MembershipOverStores : public store_test::StoreContract {
 protected:
  Membership& add(const std::string& id, int max_workers) {
    MembershipOptions options;
    options.worker_id = id;
    options.min_workers = 1;
    options.max_workers = max_workers;
    options.failure_timeout = lease_ttl(1000ms);
    options.heartbeat = 100ms;
    options.settle_time = options.failure_timeout;
    views_[id] = std::make_shared<membership_test::HeartbeatSwitchStore>(client());
    return *(workers_[id] = std::make_unique<Membership>(views_[id], options));
  }

  std::vector<WorldView> on_threads(const Ids& ids,
                                    const std::function<WorldView(Membership&)>& call) {
    return membership_test::on_threads(
        ids, [&](const std::string& id) -> Membership& { return *workers_.at(id); }, call);
  }

  void TearDown() override {
    workers_.clear();  // leave before the store goes
    views_.clear();
    StoreContract::TearDown();
  }

  std::map<std::string, std::shared_ptr<membership_test::HeartbeatSwitchStore>> views_;
  std::map<std::string, std::unique_ptr<Membership>> workers_;
};

TEST_P(MembershipOverStores, RacingProposalsYieldOneWorld) {
  const Ids ids = {"a", "b", "c", "d"};
  for (const auto& id : ids) add(id, 4);
  const auto first = on_threads(ids, [](Membership& m) { return m.join(deadline_after(20s)); });
  for (const auto& view : first) EXPECT_EQ(view.members, ids);

  const auto gate = std::make_shared<membership_test::ProposalGate>(4);
  for (auto& [id, view] : views_) view->gate_world_writes(gate);
  const auto second = on_threads(ids, [&](Membership& m) {
    Ids others;
    for (const auto& id : ids) {
      if (id != m.worker_id()) others.push_back(id);
    }
    return m.next_generation(1, others, deadline_after(20s));
  });
  for (std::size_t i = 0; i < ids.size(); ++i) {
    EXPECT_EQ(second[i].generation, 2);
    EXPECT_EQ(second[i].members, second[0].members);
    const auto& members = second[i].members;
    const auto it = std::find(members.begin(), members.end(), ids[i]);
    EXPECT_EQ(second[i].rank,
              it == members.end() ? std::nullopt : std::optional<int>(it - members.begin()));
  }
}

TEST_P(MembershipOverStores, AWorkerWhoseLeaseExpiredIsLeftOutAndTold) {
  for (const auto& id : {"a", "b", "c"}) add(id, 3);
  (void)on_threads({"a", "b", "c"}, [](Membership& m) { return m.join(deadline_after(20s)); });

  views_["c"]->hold_renewals(true);
  auto watcher = client();
  EXPECT_EQ(watcher->wait_for_change("membership/workers/c", "alive", 30s), std::nullopt);
  const auto started = Clock::now();
  const auto second = on_threads(
      {"a", "b"}, [](Membership& m) { return m.next_generation(1, {}, deadline_after(20s)); });
  // Well before settle_time (the ttl): the expiry, not the wait, left c out.
  EXPECT_LT(Clock::now() - started, lease_ttl(1000ms) - 200ms);
  EXPECT_EQ(second[0].members, (Ids{"a", "b"}));
  EXPECT_EQ(second[1].members, (Ids{"a", "b"}));

  views_["c"]->hold_renewals(false);
  const auto until = Clock::now() + 10s;
  while (!workers_["c"]->lease_lost() && Clock::now() < until) std::this_thread::sleep_for(20ms);
  EXPECT_TRUE(workers_["c"]->lease_lost());
}

// A failure_timeout the store cannot grant as a lease (beyond 30 days anywhere, not whole
// seconds over etcd) once surfaced as "internal error: ... (this is a bug ...)" on every rank:
// it is the user's value, so a ConfigError naming it and carrying the store's reason.
TEST_P(MembershipOverStores, ALeaseTheStoreRefusesIsAConfigErrorNamingFailureTimeout) {
  std::vector<Duration> refused = {Duration(31LL * 24 * 3600 * 1000)};
  if (GetParam() == "etcd") refused.push_back(2500ms);
  for (const auto ttl : refused) {
    MembershipOptions options;
    options.worker_id = "a";
    options.min_workers = 1;
    options.max_workers = 1;
    options.failure_timeout = ttl;
    options.heartbeat = 100ms;
    options.settle_time = 1000ms;
    Membership membership(client(), options);
    try {
      (void)membership.join(deadline_after(20s));
      ADD_FAILURE() << "a lease of " << ttl.count() << " ms was granted";
    } catch (const ConfigError& e) {
      const std::string message = e.what();
      EXPECT_NE(message.find("[elastic] failure_timeout = " + std::to_string(ttl.count()) +
                             " ms is the ttl of each worker's lease, and this job's store "
                             "refuses it: "),
                std::string::npos)
          << message;
      EXPECT_NE(message.find("a lease"), std::string::npos) << message;  // the store's reason
    }
  }
}

INSTANTIATE_TEST_SUITE_P(EveryStore, MembershipOverStores,
                         ::testing::Values("memory", "tcp", "file", "etcd"),
                         store_test::store_param_name);

}  // namespace
}  // namespace tessera
