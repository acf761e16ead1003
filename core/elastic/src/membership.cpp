#include "tessera/elastic/membership.hpp"

#include <algorithm>
#include <charconv>
#include <map>
#include <set>
#include <string_view>

#include "tessera/base/error.hpp"

namespace tessera {

namespace {

using Clock = std::chrono::steady_clock;

// How often a waiting participant looks again at who is alive: a lease that expires wakes no
// watcher of the changes counter, so the wait on it is cut into slices this long.
constexpr Duration kPollInterval{100};
// How long stopping the heartbeat waits for a renewal in flight, at least (else one heartbeat).
constexpr Duration kStopWait{500};

// The value of a ready mark: whether its worker holds the previous world's state.
const std::string kMemberRole = "member";
const std::string kNewcomerRole = "newcomer";

constexpr std::size_t kMaxIdLength = 128;
// Every key of the membership lives under it in the job's store.
constexpr const char* kPrefix = "membership";

std::string g_text(std::int64_t generation) {
  return std::to_string(generation);
}
std::string worker_key(const std::string& id) {
  return "workers/" + id;
}
// A counter each worker's heartbeat rewrites, bound to its lease: whoever forms a generation sees
// from it whether a member it waits for still beats.
std::string beat_key(const std::string& id) {
  return "beats/" + id;
}
std::string world_key(std::int64_t generation) {
  return "world/" + g_text(generation);
}
std::string ready_prefix(std::int64_t generation) {
  return "ready/" + g_text(generation) + "/";
}
std::string changes_key(std::int64_t generation) {
  return "changes/" + g_text(generation);
}
const std::string kGenerationKey = "generation";

// Ids are joined with ',' in stored worlds and are key segments: neither may appear in one.
bool valid_id(const std::string& id) {
  if (id.empty() || id.size() > kMaxIdLength) return false;
  return std::all_of(id.begin(), id.end(), [](char c) {
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '.' ||
           c == '_' || c == '-' || c == ':' || c == '@';
  });
}

std::string join_ids(const std::vector<std::string>& ids, const std::string& separator) {
  std::string text;
  for (const auto& id : ids) text += (text.empty() ? "" : separator) + id;
  return text;
}

std::string describe(const std::vector<std::string>& ids) {
  return ids.empty() ? std::string("none") : join_ids(ids, ", ");
}

std::vector<std::string> split_ids(std::string_view text) {
  std::vector<std::string> ids;
  while (!text.empty()) {
    const auto comma = text.find(',');
    ids.emplace_back(text.substr(0, comma));
    if (comma == std::string_view::npos) break;
    text.remove_prefix(comma + 1);
  }
  return ids;
}

// The last line of a world formed below min_workers (WorldView::stopping).
constexpr std::string_view kStoppingLine = "stop=below_min_workers\n";
constexpr std::string_view kLimitsField = "limits=";

std::string encode_world(const std::vector<std::string>& members,
                         const std::vector<std::string>& joined, const JobLimits& limits,
                         bool stopping = false) {
  return "members=" + join_ids(members, ",") + "\njoined=" + join_ids(joined, ",") + "\n" +
         std::string(kLimitsField) + std::to_string(limits.min_workers) + "," +
         std::to_string(limits.max_workers) + "\n" +
         (stopping ? std::string(kStoppingLine) : std::string());
}

// "limits=MIN,MAX": both whole numbers with 1 <= MIN <= MAX.
std::optional<JobLimits> decode_limits(std::string_view text) {
  const auto comma = text.find(',');
  if (comma == std::string_view::npos) return std::nullopt;
  JobLimits limits;
  const auto number = [](std::string_view digits, int& value) {
    const auto [end, ec] = std::from_chars(digits.data(), digits.data() + digits.size(), value);
    return ec == std::errc() && end == digits.data() + digits.size();
  };
  if (!number(text.substr(0, comma), limits.min_workers) ||
      !number(text.substr(comma + 1), limits.max_workers) || limits.min_workers < 1 ||
      limits.max_workers < limits.min_workers) {
    return std::nullopt;
  }
  return limits;
}

// A generation stored as this value ends the job (Membership::finish).
constexpr std::string_view kFinishedWorld = "finished\n";

// `own`: the limits of a world stored without them (by an older tessera).
WorldView decode_world(std::int64_t generation, const std::string& value, const std::string& self,
                       const JobLimits& own) {
  const auto malformed = [&] {
    return Error("membership: the store's key 'membership/" + world_key(generation) + "' holds '" +
                 value +
                 "', not a world tessera wrote; another program uses the membership/ keys of "
                 "this job's store: give the job its own store or prefix");
  };
  std::string_view rest = value;
  WorldView view;
  view.generation = generation;
  if (value == kFinishedWorld) {
    view.finished = true;
    return view;
  }
  for (const std::string_view field : {std::string_view("members="), std::string_view("joined=")}) {
    const auto end = rest.find('\n');
    if (!rest.starts_with(field) || end == std::string_view::npos) throw malformed();
    auto ids = split_ids(rest.substr(field.size(), end - field.size()));
    (field == "members=" ? view.members : view.joined) = std::move(ids);
    rest.remove_prefix(end + 1);
  }
  view.limits = own;
  if (rest.starts_with(kLimitsField)) {
    const auto end = rest.find('\n');
    if (end == std::string_view::npos) throw malformed();
    const auto limits = decode_limits(rest.substr(kLimitsField.size(), end - kLimitsField.size()));
    if (!limits) throw malformed();
    view.limits = *limits;
    rest.remove_prefix(end + 1);
  }
  if (rest == kStoppingLine) {
    view.stopping = true;
    rest = {};
  }
  if (!rest.empty() || view.members.empty()) throw malformed();
  const auto it = std::find(view.members.begin(), view.members.end(), self);
  if (it != view.members.end()) view.rank = static_cast<int>(it - view.members.begin());
  return view;
}

// The ids under `prefix`, with their values.
std::map<std::string, std::string> listed_ids(Store& store, const std::string& prefix) {
  std::map<std::string, std::string> ids;
  for (auto& [key, value] : store.list(prefix)) ids.emplace(key.substr(prefix.size()), value);
  return ids;
}

long long ms_since(Clock::time_point start) {
  return std::chrono::duration_cast<Duration>(Clock::now() - start).count();
}

}  // namespace

Duration regroup_silence(const MembershipOptions& options) {
  return std::min(std::max(4 * options.heartbeat, Duration(500)), options.failure_timeout / 2);
}

Membership::Membership(std::shared_ptr<Store> store, MembershipOptions options)
    : options_(std::move(options)) {
  TESSERA_CHECK(store != nullptr, "membership: no store");
  store_ = std::make_shared<PrefixStore>(kPrefix, std::move(store));
  const auto& o = options_;
  if (!valid_id(o.worker_id)) {
    throw InvalidArgument("membership: worker id '" + o.worker_id +
                          "' is not valid: use 1 to 128 letters, digits and . _ - : @");
  }
  if (o.min_workers < 1 || o.max_workers < o.min_workers) {
    throw InvalidArgument("membership: min_workers = " + std::to_string(o.min_workers) +
                          " and max_workers = " + std::to_string(o.max_workers) +
                          " need 1 <= min_workers <= max_workers (--min-workers, --max-workers)");
  }
  if (o.heartbeat < Duration(1) || o.heartbeat >= o.failure_timeout) {
    throw InvalidArgument("membership: heartbeat (" + std::to_string(o.heartbeat.count()) +
                          " ms) must be at least 1 ms and shorter than failure_timeout (" +
                          std::to_string(o.failure_timeout.count()) + " ms)");
  }
  if (o.settle_time < Duration(0) || o.settle_time > o.failure_timeout) {
    throw InvalidArgument("membership: settle_time (" + std::to_string(o.settle_time.count()) +
                          " ms) must be between 0 and failure_timeout (" +
                          std::to_string(o.failure_timeout.count()) + " ms)");
  }
}

Membership::~Membership() {
  // A store that does not answer (etcd killed after the run) must not hold the worker's exit:
  // the lease then ends by itself after its ttl.
  if (!stop_heartbeat()) return;
  if (lease_ == LeaseId{} || heartbeat_state_->lease_lost.load()) return;
  try {
    store_->revoke_lease(lease_);
  } catch (...) {  // NOLINT(bugprone-empty-catch): the lease then ends by itself after its ttl
  }
}

void Membership::register_worker() {
  if (lease_ != LeaseId{} && !heartbeat_state_->lease_lost.load()) return;
  if (stop_heartbeat()) {
    // Reset in place: other threads ask lease_lost() through this state.
    std::lock_guard lock(heartbeat_state_->mutex);
    heartbeat_state_->stop = false;
    heartbeat_state_->done = false;
    heartbeat_state_->lease_error.clear();
    heartbeat_state_->unanswered_since.reset();
    heartbeat_state_->store_silence.reset();
    heartbeat_state_->lease_lost.store(false);
  } else {
    // The old thread still waits for the store with the old state: the new one gets its own.
    heartbeat_state_ = std::make_shared<HeartbeatState>();
  }
  // Best effort: two live workers with one id would be one member to everybody else.
  if (store_->check(worker_key(options_.worker_id))) {
    throw InvalidArgument("membership: worker id '" + options_.worker_id +
                          "' is already registered by a live worker of this job; give each "
                          "worker its own id");
  }
  try {
    lease_ = store_->grant_lease(options_.failure_timeout);
  } catch (const InvalidArgument& e) {
    // A store's own bounds on a lease (etcd: whole seconds, at least its election minimum)
    // are known only to the store in hand: a value it refuses is the user's to change.
    throw ConfigError(
        "[elastic] failure_timeout = " + std::to_string(options_.failure_timeout.count()) +
        " ms is the ttl of each worker's lease, and this job's store refuses it: " + e.what() +
        "; set failure_timeout to a ttl the store grants");
  }
  store_->set(worker_key(options_.worker_id), "alive", lease_);
  store_->set(beat_key(options_.worker_id), "0", lease_);
  heartbeat_ =
      std::thread(heartbeat_loop, heartbeat_state_, store_, lease_, beat_key(options_.worker_id),
                  options_.heartbeat, options_.failure_timeout);
}

bool Membership::stop_heartbeat() noexcept {
  if (!heartbeat_.joinable()) return true;
  const auto state = heartbeat_state_;
  std::unique_lock lock(state->mutex);
  state->stop = true;
  state->wake.notify_all();
  // A renewal in flight against a store that does not answer takes up to the store's own
  // timeout (etcd: 30 s by default, with retries): wait a heartbeat for it, then leave the
  // thread to end by itself. It holds its state and the store, so nothing it uses goes away.
  const bool ended = state->wake.wait_for(lock, std::max(options_.heartbeat, kStopWait),
                                          [&] { return state->done; });
  lock.unlock();
  if (ended) {
    heartbeat_.join();
  } else {
    heartbeat_.detach();
  }
  return ended;
}

void Membership::heartbeat_loop(const std::shared_ptr<HeartbeatState>& state,
                                const std::shared_ptr<Store>& store, LeaseId lease,
                                const std::string& beat_key, Duration period, Duration ttl) {
  std::uint64_t beats = 0;
  std::unique_lock lock(state->mutex);
  state->last_answered = Clock::now();
  while (!state->wake.wait_for(lock, period, [&] { return state->stop; })) {
    if (!state->unanswered_since) state->unanswered_since = Clock::now();
    lock.unlock();
    try {
      store->keep_alive(lease);
      store->set(beat_key, std::to_string(++beats), lease);
      lock.lock();
      state->unanswered_since.reset();
      state->last_answered = Clock::now();
      state->renewals_failing = false;
      continue;
    } catch (const LeaseExpired& error) {
      lock.lock();
      state->lease_error = error.what();
      state->store_silence = outage_of(*state, period, ttl);
      state->lease_lost.store(true);
      break;
    } catch (const std::exception&) {
      // The store could not be reached after its own retries: try again at the next beat. If
      // the outage outlasts the ttl, the next renewal that gets through reports the expiry.
      // unanswered_since stays: the store's silence goes on.
      lock.lock();
      state->renewals_failing = true;
      continue;
    }
    lock.lock();
  }
  state->done = true;
  state->wake.notify_all();
}

std::optional<Duration> Membership::outage_of(const HeartbeatState& state, Duration period,
                                              Duration ttl) {
  if (!state.unanswered_since) return std::nullopt;
  // The lease ends a ttl after the last renewal that got through, and this worker asked again
  // every period since: renewals unanswered (blocked or failing) for nearly all of that time
  // mean the store did not answer, where a worker that stalled itself (SIGSTOP) asks again
  // only once it wakes, and is answered at once.
  const auto now = Clock::now();
  if (now - *state.unanswered_since < std::max(ttl - 2 * period, ttl / 2)) return std::nullopt;
  return std::chrono::duration_cast<Duration>(now - state.last_answered);
}

std::optional<Duration> Membership::store_silence() const {
  const auto state = heartbeat_state_;
  std::lock_guard lock(state->mutex);
  if (state->store_silence) return state->store_silence;
  // A renewal may still wait for the store, the lease ending in its silence right now (another
  // call of this worker's may have heard of it first).
  if (state->lease_lost.load()) {
    return outage_of(*state, options_.heartbeat, options_.failure_timeout);
  }
  return std::nullopt;
}

void Membership::confirm_lease() {
  throw_if_lease_lost();
  const auto state = heartbeat_state_;
  Duration unanswered{};
  bool renewals_failing = false;
  {
    const std::lock_guard lock(state->mutex);
    unanswered = std::chrono::duration_cast<Duration>(Clock::now() - state->last_answered);
    renewals_failing = state->renewals_failing;
  }
  // Renewals failing is the store's outage, which the heartbeat's own rules ride out or name.
  if (unanswered < options_.failure_timeout / 2 || renewals_failing) return;
  try {
    if (store_->check(worker_key(options_.worker_id))) return;
  } catch (const std::exception&) {
    return;  // the store did not answer: no more known than before
  }
  {
    const std::lock_guard lock(state->mutex);
    if (!state->lease_lost.load()) {
      state->lease_error = "its registration was gone when it asked after " +
                           std::to_string(unanswered.count()) +
                           " ms without an answered renewal (the process was stopped or stalled "
                           "longer than failure_timeout)";
      state->lease_lost.store(true);
    }
  }
  throw_if_lease_lost();
}

void Membership::throw_if_lease_lost() {
  if (!heartbeat_state_->lease_lost.load()) return;
  std::string cause;
  {
    std::lock_guard lock(heartbeat_state_->mutex);
    cause = heartbeat_state_->lease_error;
  }
  const auto silence = store_silence();
  throw LeaseExpired("membership: worker '" + options_.worker_id +
                         "' lost its lease, so the others count it gone (" + cause + ")" +
                         (silence ? "; the job's store had not answered its renewals for " +
                                        std::to_string(silence->count()) +
                                        " ms, longer than the lease's ttl (failure_timeout = " +
                                        std::to_string(options_.failure_timeout.count()) + " ms)"
                                  : std::string()) +
                         "; call join() to come back as a newcomer",
                     lease_);
}

std::optional<WorldView> Membership::stored_world(std::int64_t generation) {
  const auto key = world_key(generation);
  if (!store_->check(key)) return std::nullopt;
  // Worlds are never removed: the get returns at once.
  return decode_world(generation, store_->get(key, options_.failure_timeout), options_.worker_id,
                      {options_.min_workers, options_.max_workers});
}

void Membership::advance_generation_pointer(std::int64_t generation) {
  const auto desired = g_text(generation);
  std::string expected;
  for (;;) {
    const auto stored = store_->compare_set(kGenerationKey, expected, desired);
    if (stored == desired) return;
    std::int64_t newest = 0;
    std::from_chars(stored.data(), stored.data() + stored.size(), newest);
    if (newest >= generation) return;
    expected = stored;
  }
}

std::int64_t Membership::newest_generation() {
  std::int64_t newest = 0;
  if (store_->check(kGenerationKey)) {
    const auto text = store_->get(kGenerationKey, options_.failure_timeout);
    std::from_chars(text.data(), text.data() + text.size(), newest);
  }
  // The pointer may lag behind a world just formed.
  while (store_->check(world_key(newest + 1))) ++newest;
  return newest;
}

WorldView Membership::join(Deadline deadline) {
  const bool registered = lease_ != LeaseId{} && !heartbeat_state_->lease_lost.load();
  register_worker();
  const auto newest = newest_generation();
  if (registered && newest > 0 && stored_world(newest)->is_member()) {
    throw InvalidArgument("membership: worker '" + options_.worker_id +
                          "' called join() but is a member of generation " + g_text(newest) +
                          ", the newest; a member moves on with next_generation()");
  }
  if (newest > 0) {
    if (auto world = stored_world(newest); world && (world->finished || world->stopping)) {
      return *world;
    }
  }
  for (std::int64_t generation = newest + 1;; ++generation) {
    auto view = form(generation, std::nullopt, {}, deadline, BelowMinWorkers::fail);
    if (view.is_member() || view.finished || view.stopping) return view;
  }
}

void Membership::finish(std::int64_t current) {
  const auto generation = current + 1;
  (void)store_->compare_set(world_key(generation), "", std::string(kFinishedWorld));
  store_->add(changes_key(generation), 1);
  advance_generation_pointer(generation);
}

WorldView Membership::next_generation(std::int64_t current, const std::vector<std::string>& failed,
                                      Deadline deadline, BelowMinWorkers below) {
  throw_if_lease_lost();
  auto world = lease_ == LeaseId{} ? std::nullopt : stored_world(current);
  if (!world || !world->is_member()) {
    throw InvalidArgument("membership: worker '" + options_.worker_id +
                          "' asked for the generation after " + g_text(current) +
                          ", but it is not a member of generation " + g_text(current) +
                          "; a worker enters a world with join()");
  }
  return form(current + 1, world, failed, deadline, below);
}

std::vector<std::string> Membership::departed(const WorldView& world) {
  const auto alive = listed_ids(*store_, "workers/");
  std::vector<std::string> gone;
  for (const auto& member : world.members) {
    if (!alive.contains(member)) gone.push_back(member);
  }
  return gone;
}

bool Membership::joiners_waiting(std::int64_t current) {
  throw_if_lease_lost();
  const auto world = stored_world(current);
  if (!world || world->size() >= world->limits.max_workers) return false;
  const auto ready = listed_ids(*store_, ready_prefix(current + 1));
  return std::any_of(ready.begin(), ready.end(),
                     [](const auto& entry) { return entry.second == kNewcomerRole; });
}

WorldView Membership::form(std::int64_t generation, const std::optional<WorldView>& survivors_of,
                           const std::vector<std::string>& failed, Deadline deadline,
                           BelowMinWorkers below) {
  const auto start = Clock::now();
  const auto& id = options_.worker_id;
  if (auto world = stored_world(generation)) return *world;  // formed already, maybe without us

  const auto ready_key = ready_prefix(generation) + id;
  const auto adopt = [&](WorldView world) {
    // Nobody reads a generation's ready marks once its world is stored.
    store_->remove(ready_key);
    advance_generation_pointer(generation);
    return world;
  };
  throw_if_lease_lost();
  try {
    store_->set(ready_key, survivors_of ? kMemberRole : kNewcomerRole, lease_);
  } catch (const LeaseExpired& error) {
    {
      std::lock_guard lock(heartbeat_state_->mutex);
      heartbeat_state_->lease_error = error.what();
    }
    heartbeat_state_->lease_lost.store(true);
    throw_if_lease_lost();
  }
  store_->add(changes_key(generation), 1);

  // A newcomer leaves forming a world to the members of the one running, unless none is left.
  const auto previous = survivors_of     ? survivors_of
                        : generation > 1 ? stored_world(generation - 1)
                                         : std::nullopt;
  const std::set<std::string> failed_ids(failed.begin(), failed.end());
  const auto settle_end = std::min(start + options_.settle_time, deadline);
  // The job's limits are its first world's, whatever a later worker was started with (a --join
  // launcher's workers count only themselves): every member must see the same room.
  const JobLimits limits =
      previous ? previous->limits : JobLimits{options_.min_workers, options_.max_workers};
  const auto min_workers = static_cast<std::size_t>(limits.min_workers);
  const auto max_workers = static_cast<std::size_t>(limits.max_workers);
  std::optional<std::string> seen_changes;
  // Each member's beat counter as this worker last saw it change, and when: one whose counter
  // stood still for regroup_silence while the others regroup is not waited for (its lease may
  // still have most of failure_timeout to run: nobody is left to remove a dead node's keys).
  const auto silence = regroup_silence(options_);
  std::map<std::string, std::pair<std::string, Clock::time_point>> heard;

  for (;;) {
    if (auto world = stored_world(generation)) return adopt(*world);
    throw_if_lease_lost();
    const auto alive = listed_ids(*store_, "workers/");
    const auto ready = listed_ids(*store_, ready_prefix(generation));
    const auto beats = survivors_of ? listed_ids(*store_, "beats/") : decltype(alive){};
    const auto looked = Clock::now();
    const auto silent = [&](const std::string& worker) {
      const auto it = beats.find(worker);
      const std::string beat = it == beats.end() ? std::string() : it->second;
      auto [entry, first] = heard.try_emplace(worker, beat, looked);
      if (!first && entry->second.first != beat) entry->second = {beat, looked};
      return looked - entry->second.second >= silence;
    };
    // Alive, not known failed, not ready. The members of a running world wait only for each
    // other: a newcomer still starting up is admitted at a later step boundary rather than
    // holding back the survivors of a failure.
    std::vector<std::string> awaited;
    for (const auto& [worker, value] : alive) {
      if (ready.contains(worker) || failed_ids.contains(worker)) continue;
      if (survivors_of && std::find(survivors_of->members.begin(), survivors_of->members.end(),
                                    worker) == survivors_of->members.end()) {
        continue;
      }
      if (survivors_of && silent(worker)) continue;
      awaited.push_back(worker);
    }
    bool members_alive = false;
    if (!survivors_of && previous) {
      for (const auto& member : previous->members) {
        const auto it = ready.find(member);
        const bool rejoining = it != ready.end() && it->second == kNewcomerRole;
        if (alive.contains(member) && !rejoining) members_alive = true;
      }
    }
    const bool may_propose = survivors_of || !members_alive;
    const auto now = Clock::now();
    bool propose = false;
    if (may_propose && ready.size() >= min_workers) {
      propose = survivors_of ? awaited.empty() || now >= settle_end
                             : ready.size() >= max_workers || now >= settle_end;
    }

    if (propose) {
      // Survivors first, in their old order (they hold the state; their ranks stay stable), then
      // newcomers by id; the map keeps them sorted.
      std::vector<std::string> members;
      std::vector<std::string> joined;
      if (survivors_of) {
        for (const auto& member : survivors_of->members) {
          const auto it = ready.find(member);
          if (it != ready.end() && it->second == kMemberRole) members.push_back(member);
        }
      }
      for (const auto& [worker, role] : ready) {
        if (members.size() >= max_workers) break;
        if (std::find(members.begin(), members.end(), worker) != members.end()) continue;
        members.push_back(worker);
        joined.push_back(worker);
      }
      (void)store_->compare_set(world_key(generation), "", encode_world(members, joined, limits));
      store_->add(changes_key(generation), 1);
      continue;  // adopt what is stored, ours or not
    }

    std::vector<std::string> ready_ids;
    for (const auto& [worker, role] : ready) ready_ids.push_back(worker);
    if (now >= deadline && survivors_of && below == BelowMinWorkers::stop) {
      // The survivors that are ready stop together; the first to get here writes their world.
      std::vector<std::string> members;
      for (const auto& member : survivors_of->members) {
        const auto it = ready.find(member);
        if (it != ready.end() && it->second == kMemberRole) members.push_back(member);
      }
      if (!members.empty()) {
        (void)store_->compare_set(world_key(generation), "",
                                  encode_world(members, {}, limits, true));
        store_->add(changes_key(generation), 1);
        continue;  // adopt what is stored, ours or not
      }
    }
    if (now >= deadline) {
      // A newcomer that gives up must not make the members form a world for it. A member's mark
      // stays: the others, giving up at the same moment, count it in what they report.
      if (!survivors_of) store_->remove(ready_key);
      if (may_propose) {
        throw Timeout("membership: generation " + g_text(generation) +
                      " needs min_workers = " + std::to_string(limits.min_workers) + " but only " +
                      std::to_string(ready.size()) + " worker(s) are ready (" +
                      describe(ready_ids) + "; alive but not ready: " + describe(awaited) +
                      ") after waiting " + std::to_string(ms_since(start)) +
                      " ms for more; start more workers (tessera launch --join) or lower "
                      "--min-workers ([elastic] min_workers)");
      }
      const bool full = previous->size() >= limits.max_workers;
      throw Timeout(
          "membership: worker '" + id + "' was not admitted within " +
          std::to_string(ms_since(start)) + " ms: generation " + g_text(generation - 1) +
          " runs with " + std::to_string(previous->size()) + " member(s) (" +
          describe(previous->members) + ") of max_workers = " + std::to_string(limits.max_workers) +
          (full ? ", so there is no room until one leaves; raise --max-workers "
                  "([elastic] max_workers) to let more in"
                : ", and they formed no next world; members admit newcomers at step boundaries "
                  "(Membership::joiners_waiting)"));
    }

    auto slice = std::min<Clock::duration>(kPollInterval, deadline - now);
    if (may_propose && now < settle_end) slice = std::min<Clock::duration>(slice, settle_end - now);
    try {
      seen_changes = store_->wait_for_change(changes_key(generation), seen_changes,
                                             std::chrono::ceil<Duration>(slice));
    } catch (const Timeout&) {  // NOLINT(bugprone-empty-catch): a slice ended; look again
    }
  }
}

void mark_worker_gone(Store& job_store, const std::string& id) {
  job_store.remove(std::string(kPrefix) + "/" + worker_key(id));
}

bool any_worker_alive(Store& job_store, const std::string& id_prefix) {
  return !job_store.list(std::string(kPrefix) + "/" + worker_key(id_prefix)).empty();
}

bool worker_alive(Store& job_store, const std::string& id) {
  return job_store.check(std::string(kPrefix) + "/" + worker_key(id));
}

}  // namespace tessera
