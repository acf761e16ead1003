#include "tessera/elastic/elastic_world.hpp"

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <mutex>
#include <thread>

#include "fail_fast_store.hpp"
#include "tessera/base/error.hpp"
#include "tessera/elastic/membership.hpp"

namespace tessera {

ElasticWorld::~ElasticWorld() = default;

std::string ElasticWorld::failure_domain() const {
  return {};
}

void ElasticWorld::confirm_membership() {}

std::optional<Duration> ElasticWorld::store_silence() const {
  return std::nullopt;
}

std::string failure_domain_of(const std::string& worker_id) {
  // Launcher ids are <node>.w<local>[.r<restart>]: the node is what dies with a host.
  const auto at = worker_id.rfind(".w");
  return at == std::string::npos || at == 0 ? worker_id : worker_id.substr(0, at);
}

bool Regrouping::joins_running_job() const {
  if (!world) return false;
  const bool members_hold_state =
      std::any_of(previous_rank.begin(), previous_rank.end(), [](int rank) { return rank >= 0; });
  return members_hold_state && previous_rank.at(static_cast<std::size_t>(world->rank())) < 0;
}

namespace {

// A world of live members connects in well under a second; this much is allowed however short
// failure_timeout is.
constexpr Duration kLeastConnectTimeout{2000};

std::string listed(const std::vector<std::string>& ids) {
  std::string text;
  for (const auto& id : ids) text += (text.empty() ? "" : ", ") + id;
  return text.empty() ? "none" : text;
}

class MembershipWorld final : public ElasticWorld {
 public:
  MembershipWorld(std::shared_ptr<Transport> transport, std::shared_ptr<Store> store,
                  ElasticOptions options, std::string worker_id, Duration timeout)
      : transport_(std::move(transport)),
        store_(std::make_shared<elastic::FailFastStore>(std::move(store), options.failure_timeout)),
        options_(std::move(options)),
        timeout_(timeout),
        membership_(store_, {std::move(worker_id), options_.min_workers, options_.max_workers,
                             options_.heartbeat, options_.failure_timeout,
                             // Survivors wait this long for a worker that is alive but not
                             // ready; a dead one's lease ends within failure_timeout anyway.
                             options_.failure_timeout}),
        watcher_([this] { watch(); }) {}

  ~MembershipWorld() override {
    {
      std::lock_guard lock(mutex_);
      stop_ = true;
    }
    wake_.notify_all();
    watcher_.join();
  }

  Regrouping enter(Deadline deadline) override { return connect(membership_.join(deadline)); }

  Regrouping regroup(const std::string& reason, Deadline deadline) override {
    WorldView current;
    {
      std::lock_guard lock(mutex_);
      abort_locked(reason);
      current = view_;
    }
    TESSERA_CHECK(current.is_member(), "elastic: regroup before enter");
    return connect_or_join(
        membership_.next_generation(current.generation, membership_.departed(current), deadline,
                                    BelowMinWorkers::stop),
        deadline);
  }

  bool newcomers_waiting() override {
    std::shared_ptr<Communicator> world;
    std::int64_t waiting = 0;
    {
      std::lock_guard lock(mutex_);
      TESSERA_CHECK(view_.is_member(), "elastic: newcomers_waiting before enter");
      if (view_.size() >= view_.limits.max_workers) return false;
      world = world_;
      waiting = joiners_seen_for_.load() == view_.generation ? 1 : 0;
    }
    world->broadcast({&waiting, 1, DType::i64, Device::cpu()}, 0)->wait();
    return waiting != 0;
  }

  Regrouping admit(Deadline deadline) override {
    WorldView current;
    {
      std::lock_guard lock(mutex_);
      current = view_;
      // The old world stays whole until every member has left it for the new one; the watcher
      // must not take a member's move for a departure.
      aborted_ = true;
    }
    return connect_or_join(
        membership_.next_generation(current.generation, {}, deadline, BelowMinWorkers::stop),
        deadline);
  }

  std::shared_ptr<Communicator> side_channel() override {
    std::shared_ptr<Communicator> world;
    {
      std::lock_guard lock(mutex_);
      if (side_) return side_;
      world = world_;
    }
    TESSERA_CHECK(world != nullptr, "elastic: side_channel before enter");
    std::shared_ptr<Communicator> side =
        world->size() == 1 ? world : world->split(0, world->rank());
    std::lock_guard lock(mutex_);
    if (world_ != world) {
      side->abort("elastic: the world this channel belongs to was replaced");
      return side;
    }
    side_ = side;
    // The watcher may have aborted the world while the channel was being connected.
    if (aborted_) side_->abort("elastic: the world this channel belongs to was aborted");
    return side_;
  }

  std::shared_ptr<Communicator> private_world() override {
    auto rendezvous = std::make_shared<PrefixStore>(
        "private/" + membership_.worker_id() + "/" + std::to_string(++private_worlds_), store_);
    return transport_->connect(std::move(rendezvous), 0, 1, timeout_);
  }

  void finish() override {
    std::int64_t generation = 0;
    {
      std::lock_guard lock(mutex_);
      generation = view_.generation;
    }
    membership_.finish(generation);
  }

  const ElasticOptions& options() const override { return options_; }

  std::vector<std::optional<std::string>> gather_without_world(const std::string& round,
                                                               const std::string& mine,
                                                               Deadline deadline) override {
    WorldView view;
    {
      std::lock_guard lock(mutex_);
      view = view_;
    }
    if (!view.is_member()) {
      throw InvalidArgument("elastic: gather_without_world before this worker entered a world");
    }
    PrefixStore keys("without_world/" + std::to_string(view.generation) + "/" + round, store_);
    keys.set("value/" + std::to_string(*view.rank), mine);
    keys.add("changes", 1);
    std::optional<std::string> seen;
    while (!keys.check("roster")) {
      const auto posted = keys.list("value/");
      const auto gone = membership_.departed(view);
      std::size_t accounted = posted.size();
      for (int r = 0; r < view.size(); ++r) {
        const bool has_posted = std::ranges::any_of(
            posted, [&](const auto& entry) { return entry.first == "value/" + std::to_string(r); });
        if (!has_posted && std::ranges::count(gone, view.members[static_cast<std::size_t>(r)]) > 0)
          ++accounted;
      }
      const auto now = std::chrono::steady_clock::now();
      if (accounted >= static_cast<std::size_t>(view.size()) || now >= deadline) {
        std::string roster;
        for (const auto& [key, value] : posted) roster += key.substr(6) + ",";
        (void)keys.compare_set("roster", "", roster);
        keys.add("changes", 1);
        continue;
      }
      try {
        seen = keys.wait_for_change(
            "changes", seen,
            std::chrono::ceil<Duration>(
                std::min<std::chrono::steady_clock::duration>(Duration(100), deadline - now)));
      } catch (const Timeout&) {  // NOLINT(bugprone-empty-catch): a slice ended; look again
      }
    }
    std::vector<std::optional<std::string>> values(static_cast<std::size_t>(view.size()));
    const auto roster = keys.get("roster", options_.failure_timeout);
    const auto posted = keys.list("value/");
    for (const auto& [key, value] : posted) {
      const auto rank = key.substr(6);
      if (roster.find(rank + ",") == 0 || roster.find("," + rank + ",") != std::string::npos) {
        values.at(static_cast<std::size_t>(std::stoi(rank))) = value;
      }
    }
    return values;
  }

  std::string failure_domain() const override { return failure_domain_of(membership_.worker_id()); }

  std::optional<Duration> store_silence() const override {
    if (auto silence = membership_.store_silence()) return silence;
    return store_->given_up_after();
  }

  void confirm_membership() override { membership_.confirm_lease(); }

 private:
  // A generation formed without this worker (it came late): it enters the next one as a
  // newcomer, unless the job stops at that one.
  Regrouping connect_or_join(WorldView view, Deadline deadline) {
    if (!view.is_member() && !view.finished && !view.stopping) view = membership_.join(deadline);
    return connect(std::move(view));
  }

  Regrouping connect(WorldView view) {
    Regrouping out;
    out.generation = view.generation;
    out.stopping = view.stopping;
    if (view.finished || !view.is_member()) {
      out.finished = true;
      return out;
    }
    out.joined = view.joined;
    out.members = view.members;
    const auto previous =
        view.generation > 1 ? membership_.world(view.generation - 1) : std::nullopt;
    for (const auto& member : view.members) {
      int rank = -1;
      const bool newcomer =
          std::find(view.joined.begin(), view.joined.end(), member) != view.joined.end();
      if (previous && !newcomer) {
        const auto it = std::find(previous->members.begin(), previous->members.end(), member);
        if (it != previous->members.end()) rank = static_cast<int>(it - previous->members.begin());
      }
      out.previous_rank.push_back(rank);
    }
    if (previous) {
      for (const auto& member : previous->members) {
        if (std::find(view.members.begin(), view.members.end(), member) == view.members.end()) {
          out.left.push_back(member);
        }
      }
    }
    // This worker is a member of the new generation from now on, connected or not: should a
    // member die before it connects, the next regroup forms the generation after it.
    const auto generation = view.generation;
    const int rank = *view.rank;
    const int size = view.size();
    {
      std::lock_guard lock(mutex_);
      world_.reset();
      side_.reset();
      aborted_ = true;  // nothing for the watcher to abort until the world is connected
      view_ = std::move(view);
    }
    // Each generation meets under its own prefix: no key of a world that failed is read again.
    auto rendezvous = std::make_shared<PrefixStore>("gen/" + std::to_string(generation), store_);
    out.world = transport_->connect(std::move(rendezvous), rank, size, connect_timeout());
    {
      std::lock_guard lock(mutex_);
      world_ = out.world;
      aborted_ = false;
    }
    wake_.notify_all();
    return out;
  }

  // Every member of a generation was alive and ready when it was formed, so its world connects
  // within moments; one that dies before it attaches would otherwise hold the others for the
  // transport's whole timeout. failure_timeout bounds the wait: a Timeout then makes the
  // survivors regroup without it.
  [[nodiscard]] Duration connect_timeout() const {
    return std::min(timeout_, std::max(options_.failure_timeout, kLeastConnectTimeout));
  }

  // Aborts the current world once a member's lease is gone, so that nobody waits on it for the
  // transport's timeout.
  void watch() {
    std::unique_lock lock(mutex_);
    while (!stop_) {
      wake_.wait_for(lock, std::max(options_.heartbeat / 2, Duration(20)));
      if (stop_ || !world_ || aborted_) continue;
      const auto world = world_;
      const auto view = view_;
      lock.unlock();
      std::string reason;
      try {
        // Rank 0 looks for newcomers; it tells the others at the next step boundary.
        if (view.rank == 0 && view.size() < view.limits.max_workers) {
          if (membership_.joiners_waiting(view.generation)) joiners_seen_for_ = view.generation;
        }
        if (membership_.lease_lost()) {
          reason = "elastic: this worker's lease ended (it was counted gone)";
        } else if (const auto gone = membership_.departed(view); !gone.empty()) {
          reason = "elastic: worker(s) " + listed(gone) + " of generation " +
                   std::to_string(view.generation) + " left (their lease ended)";
        }
      } catch (const Error& e) {
        reason = std::string("elastic: the store failed while watching the members: ") + e.what();
      }
      lock.lock();
      if (!reason.empty() && world_ == world && !aborted_) abort_locked(reason);
    }
  }

  // The current world and its side channel fail together. Called with mutex_ held.
  void abort_locked(const std::string& reason) {
    if (world_) world_->abort(reason);
    if (side_) side_->abort(reason);
    aborted_ = true;
  }

  std::shared_ptr<Transport> transport_;
  // The job's store, given up on once it has not answered for longer than a lease: the way out
  // of a job that lost it then costs one store timeout, not one per request.
  std::shared_ptr<elastic::FailFastStore> store_;
  ElasticOptions options_;
  Duration timeout_;
  Membership membership_;

  std::mutex mutex_;
  std::condition_variable wake_;
  bool stop_ = false;
  std::shared_ptr<Communicator> world_;  // the current generation's
  std::shared_ptr<Communicator> side_;   // world_'s side channel, once asked for
  bool aborted_ = false;                 // world_ was aborted (by the watcher or regroup)
  WorldView view_;
  // Rank 0: the generation after which the watcher saw newcomers waiting.
  std::atomic<std::int64_t> joiners_seen_for_{-1};
  int private_worlds_ = 0;
  std::thread watcher_;  // last: started once everything it reads exists
};

}  // namespace

std::shared_ptr<ElasticWorld> make_elastic_world(std::shared_ptr<Transport> transport,
                                                 std::shared_ptr<Store> store,
                                                 ElasticOptions options, std::string worker_id,
                                                 Duration timeout) {
  TESSERA_CHECK(transport != nullptr && store != nullptr,
                "make_elastic_world: no transport or store");
  return std::make_shared<MembershipWorld>(std::move(transport), std::move(store),
                                           std::move(options), std::move(worker_id), timeout);
}

}  // namespace tessera
