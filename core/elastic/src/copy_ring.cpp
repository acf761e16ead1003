#include "copy_ring.hpp"

#include <algorithm>
#include <cstring>
#include <exception>
#include <functional>
#include <limits>
#include <string>
#include <thread>

#include "byte_gather.hpp"
#include "tessera/base/buffer_view.hpp"
#include "tessera/base/error.hpp"
#include "tessera/base/trace.hpp"

namespace tessera::elastic {

namespace {

// Tag of the ring's messages: the distance along the ring in the low bits, so that copies for
// r+1 and r+2 never match each other's receives.
constexpr std::uint32_t kBytesTag = 0x454d0000;  // "EM"

// Own copies kept (the newest refreshes'), and the slots of the area that holds them.
constexpr std::size_t kOwnCopies = 3;
// Room in a slot beyond the first pack's length (and an eighth of it).
constexpr std::size_t kSlotSlack = 64 * 1024;
// Edges whose area is opened are told apart by the bits of one 64-bit word.
constexpr std::size_t kMaxMappedEdges = 63;

std::vector<std::int64_t> gather_i64(Communicator& world, std::vector<std::int64_t> mine) {
  std::vector<std::int64_t> all(mine.size() * static_cast<std::size_t>(world.size()));
  world.all_gather(view_of(std::span<std::int64_t>(mine)), view_of(std::span<std::int64_t>(all)))
      ->wait(world.timeout());
  return all;
}

void append_i64(std::vector<std::uint8_t>& out, std::int64_t value) {
  const auto at = out.size();
  out.resize(at + sizeof value);
  std::memcpy(out.data() + at, &value, sizeof value);
}

std::int64_t read_i64(const std::vector<std::uint8_t>& in, std::size_t& at) {
  std::int64_t value = 0;
  if (in.size() - at < sizeof value) {
    throw TransportError("elastic recovery: a rank's state arrived cut", std::nullopt,
                         "elastic state exchange");
  }
  std::memcpy(&value, in.data() + at, sizeof value);
  at += sizeof value;
  return value;
}

// A rank's failure domain as a number every rank computes alike (FNV-1a, non-negative); a rank
// without one gets a negative number of its own.
std::int64_t domain_number(const std::string& domain, int rank) {
  if (domain.empty()) return -1 - static_cast<std::int64_t>(rank);
  std::uint64_t hash = 14695981039346656037ULL;
  for (const char c : domain) {
    hash ^= static_cast<unsigned char>(c);
    hash *= 1099511628211ULL;
  }
  return static_cast<std::int64_t>(hash & 0x7fffffffffffffffULL);
}

}  // namespace

std::vector<int> copy_ring_order(std::span<const std::int64_t> domains) {
  // Ranks grouped by domain, the domains in the order their first rank appears.
  std::vector<std::vector<int>> groups;
  std::vector<std::int64_t> seen;
  for (std::size_t r = 0; r < domains.size(); ++r) {
    const auto it = std::ranges::find(seen, domains[r]);
    if (it == seen.end()) {
      seen.push_back(domains[r]);
      groups.push_back({static_cast<int>(r)});
    } else {
      groups[static_cast<std::size_t>(it - seen.begin())].push_back(static_cast<int>(r));
    }
  }
  // The domains in turn: the first rank of each, then the second of each, and so on.
  std::vector<int> order;
  for (std::size_t k = 0; order.size() < domains.size(); ++k) {
    for (const auto& group : groups) {
      if (k < group.size()) order.push_back(group[k]);
    }
  }
  return order;
}

CopyRing::~CopyRing() {
  settle();
}

void CopyRing::keep(Newest& held, Snapshot snapshot, std::size_t count) {
  held.insert(held.begin(), std::move(snapshot));
  while (held.size() > count) {
    if (held.back().bytes.capacity() > 0) spare_.push_back(std::move(held.back().bytes));
    held.pop_back();
  }
}

std::span<const std::uint8_t> CopyRing::bytes_of(const Snapshot& snapshot) const {
  if (snapshot.slot) return area_->bytes(*snapshot.slot);
  return snapshot.bytes;
}

void CopyRing::arrange(Communicator& channel, std::span<const std::uint8_t> first_pack) {
  const int n = channel.size();
  // This rank's copies go into shared memory where /dev/shm takes them, with room for packs
  // somewhat longer than the first (a longer one moves to a larger region of the area).
  next_slot_ = 0;
  area_.reset();
  if (share_on_host_) {
    try {
      area_ = std::make_unique<SnapshotArea>(
          kOwnCopies, first_pack.size() + first_pack.size() / 8 + kSlotSlack);
    } catch (const Error&) {  // NOLINT(bugprone-empty-catch): its copies are sent instead
    }
  }
  // A strategy writes the same way at every step: equal layouts on every rank mean each wrote the
  // whole state (names are unique across ranks otherwise). With them, the ranks' failure
  // domains, which place the copies, and where each rank's area is.
  const auto layout = packed_layout_digest(first_pack) & 0x7fffffffffffffffULL;
  constexpr std::size_t kFields = 5;
  const auto gathered =
      gather_i64(channel, {static_cast<std::int64_t>(layout), domain_number(failure_domain_, rank_),
                           area_ ? area_->pid() : -1, area_ ? area_->nonce() : 0,
                           area_ ? area_->pid_namespace() : 0});
  const auto field = [&](int r, std::size_t f) {
    return gathered[kFields * static_cast<std::size_t>(r) + f];
  };
  std::vector<std::int64_t> domains;
  bool same_layout = true;
  for (int r = 0; r < n; ++r) {
    same_layout = same_layout && field(r, 0) == field(0, 0);
    domains.push_back(field(r, 1));
  }
  whole_ = same_layout;
  const auto order = copy_ring_order(domains);
  const auto at = static_cast<int>(std::ranges::find(order, rank_) - order.begin());
  peers_ = {};
  peers_.send_first = at % 2 == 0;
  for (int d = 1; d <= std::min(copies_per_rank_, n - 1); ++d) {
    peers_.to.push_back(order[static_cast<std::size_t>((at + d) % n)]);
    peers_.from.push_back(order[static_cast<std::size_t>((at - d + n) % n)]);
  }
  const auto edges = peers_.to.size();
  peers_.to_mapped.assign(edges, false);
  peers_.from_mapped.assign(edges, false);

  // The areas of the ranks whose copies this rank keeps, where they are on this host: opened
  // once, read only at a recovery. Then everyone learns which edges still send.
  mapped_.clear();
  std::int64_t opened = 0;  // bit k: from[k]'s area
  for (std::size_t k = 0; k < edges && k < kMaxMappedEdges && !*whole_; ++k) {
    const int from = peers_.from[k];
    if (field(from, 2) < 0) continue;
    if (auto handle = SnapshotHandle::open(field(from, 4), field(from, 2), field(from, 3))) {
      mapped_.emplace(from, std::move(*handle));
      peers_.from_mapped[k] = true;
      opened |= std::int64_t{1} << k;
    }
  }
  const auto masks = gather_i64(channel, {opened});
  any_sent_ = false;
  for (int r = 0; r < n; ++r) {
    for (std::size_t k = 0; k < edges; ++k) {
      if (((masks[static_cast<std::size_t>(r)] >> k) & 1) == 0) any_sent_ = true;
    }
  }
  for (std::size_t k = 0; k < edges; ++k) {
    peers_.to_mapped[k] = ((masks[static_cast<std::size_t>(peers_.to[k])] >> k) & 1) != 0;
  }
  // Everyone who keeps this rank's copies holds its area open: the name can go, so that nothing
  // is left in /dev/shm whenever the processes end.
  if (area_) area_->unlink();
}

CopyRing::Snapshot CopyRing::save_into_area(Strategy& strategy, const TrainingPosition& position,
                                            int world_size) {
  const std::size_t slot = next_slot_;
  next_slot_ = (next_slot_ + 1) % area_->slots();
  std::erase_if(own_, [&](const Snapshot& held) { return held.slot == slot; });
  PackedCheckpointWriter saved(area_->begin_write(slot), overflow_,
                               /*replicated_on_every_rank=*/true);
  strategy.save(saved);
  saved.finish();
  if (saved.overflowed()) {
    const auto place = area_->grow(slot, saved.size());
    std::memcpy(place.data(), overflow_.data(), saved.size());
  }
  area_->publish(slot, position.step, position.epoch, position.samples, world_size, saved.size());
  return {position, world_size, false, false, {}, slot};
}

void CopyRing::read_mapped_copies() {
  for (auto& [old, handle] : mapped_) {
    auto& held = copies_[old];
    for (auto& record : handle.read()) {
      if (at_step(held, record.step) != nullptr) continue;
      held.push_back({{record.step, record.epoch, record.samples},
                      static_cast<int>(record.world_size),
                      false,
                      false,
                      std::move(record.bytes),
                      std::nullopt});
    }
    std::ranges::sort(held, [](const Snapshot& a, const Snapshot& b) {
      return a.position.step > b.position.step;
    });
  }
}

std::vector<std::uint8_t> CopyRing::spare_buffer(std::size_t bytes) {
  if (spare_.empty()) {
    // The first refreshes of a world: one allocation of the size the pack will have (a strategy
    // saves the same way at every step), instead of growing through every power of two.
    std::vector<std::uint8_t> fresh;
    fresh.reserve(bytes);
    return fresh;
  }
  auto buffer = std::move(spare_.back());
  spare_.pop_back();
  return buffer;
}

const CopyRing::Snapshot* CopyRing::at_step(const Newest& held, std::int64_t step) {
  for (const auto& snapshot : held) {
    if (snapshot.position.step == step) return &snapshot;
  }
  return nullptr;
}

void CopyRing::land_exchange(bool rethrow) {
  if (!in_flight_) return;
  if (in_flight_->poster.joinable()) in_flight_->poster.join();
  CopiesInFlight exchange = std::move(*in_flight_);
  in_flight_.reset();
  std::exception_ptr failed = exchange.posting_failed;
  for (const auto& work : exchange.works) {
    try {
      work->wait(channel_->timeout());
    } catch (...) {
      if (!failed) failed = std::current_exception();
    }
  }
  for (std::size_t i = 0; i < exchange.incoming.size(); ++i) {
    auto& copy = exchange.incoming[i];
    if (peers_.from_mapped[i]) continue;
    if (failed) {
      spare_.push_back(std::move(copy.bytes));
    } else {
      keep(copies_[peers_.from[i]], std::move(copy), 2);
    }
  }
  if (failed && rethrow) std::rethrow_exception(failed);
}

void CopyRing::settle() noexcept {
  if (!in_flight_) return;
  if (channel_) channel_->abort("elastic: the copies of the state of this world are dropped");
  try {
    land_exchange(false);
  } catch (...) {
    in_flight_.reset();  // a wait cannot throw past land_exchange(false); nothing else can
  }
}

void CopyRing::refresh(Strategy& strategy, const std::shared_ptr<Communicator>& channel,
                       const TrainingPosition& position) {
  TESSERA_CHECK(channel != nullptr, "CopyRing::refresh: no channel");
  if (channel != channel_) {
    clear();
    channel_ = channel;
    rank_ = channel->rank();
  }
  const int n = channel->size();
  if (live_) {
    // Nothing to copy: the strategy's own state is the copy, of the step just completed.
    own_.clear();
    own_.push_back({position, n, true, true, {}, std::nullopt});
    return;
  }
  Snapshot mine;
  {
    const trace::Span span("copy_save", "run");
    if (area_) {
      mine = save_into_area(strategy, position, n);
    } else {
      // Saved straight into a buffer of a dropped copy: one copy of the state, into warm pages.
      mine = {position,
              n,
              false,
              false,
              spare_buffer(own_.empty() ? 0 : bytes_of(own_.front()).size()),
              std::nullopt};
      PackedCheckpointWriter saved(mine.bytes, /*replicated_on_every_rank=*/true);
      strategy.save(saved);
      saved.finish();
    }
  }

  // The copies of the previous refresh have had a step to land; a peer that failed on the way
  // throws here, and the failure path recovers from older copies.
  {
    const trace::Span span("replica_land", "run");
    land_exchange(true);
  }
  if (!whole_) {
    arrange(*channel, mine.bytes);
    if (area_) {
      // The first pack moves into the area; the next ones are saved there directly.
      const std::size_t slot = next_slot_;
      next_slot_ = (next_slot_ + 1) % area_->slots();
      auto place = area_->begin_write(slot);
      if (place.size() < mine.bytes.size()) place = area_->grow(slot, mine.bytes.size());
      std::memcpy(place.data(), mine.bytes.data(), mine.bytes.size());
      area_->publish(slot, position.step, position.epoch, position.samples, n, mine.bytes.size());
      mine.bytes = {};
      mine.slot = slot;
    }
  }
  mine.whole = *whole_;
  const int peers = *whole_ ? 0 : std::min(copies_per_rank_, n - 1);
  keep(own_, std::move(mine), area_ ? area_->slots() : peers == 0 ? 2 : kOwnCopies);
  // Copies kept in shared memory on this host need nothing sent; whether any edge of the world
  // sends is agreed at its first refresh, so every rank takes part in the lengths' gather or none.
  if (peers == 0 || !any_sent_) return;

  // Lengths first (the receives must know them), then the copies, left to land in the background.
  // The main thread only starts the gather of the lengths: waiting for it here would hold every
  // rank until the slowest one has finished its step. A poster thread waits for it and issues the
  // sends and receives; the channel sees no other operation until land_exchange joins it.
  const trace::Span span("replica_send", "run");
  in_flight_.emplace();
  CopiesInFlight& exchange = *in_flight_;
  const auto out = bytes_of(own_.front());
  exchange.my_length = static_cast<std::int64_t>(out.size());
  exchange.lengths.resize(static_cast<std::size_t>(n));
  exchange.incoming.resize(static_cast<std::size_t>(peers));
  for (std::size_t k = 0; k < exchange.incoming.size(); ++k) {
    if (peers_.from_mapped[k]) continue;  // held in its owner's area
    auto& copy = exchange.incoming[k];
    copy.position = position;
    copy.world_size = n;
    copy.bytes = spare_buffer(out.size());  // about every rank's length
  }
  try {
    exchange.lengths_work =
        channel->all_gather(view_of(std::span<std::int64_t>(&exchange.my_length, 1)),
                            view_of(std::span<std::int64_t>(exchange.lengths)));
  } catch (...) {
    in_flight_.reset();
    throw;
  }
  exchange.poster = std::thread(post_copies, std::ref(exchange), channel, std::cref(peers_), out);
}

void CopyRing::post_copies(CopiesInFlight& exchange, std::shared_ptr<Communicator> channel,
                           const Peers& peers, std::span<const std::uint8_t> out) noexcept {
  try {
    // Polled, not waited for: a thread blocked in Work::wait makes a transport spin for it
    // (shm does), which on a machine with no spare core takes the core from the step.
    const Deadline deadline = deadline_after(channel->timeout());
    while (!exchange.lengths_work->test() && std::chrono::steady_clock::now() < deadline) {
      std::this_thread::sleep_for(std::chrono::microseconds(50));
    }
    exchange.lengths_work->wait(channel->timeout());  // throws the gather's failure, if any
    for (std::size_t k = 0; k < peers.to.size(); ++k) {
      const int to = peers.to[k];
      const int from = peers.from[k];
      auto& copy = exchange.incoming[k];
      const bool send = !peers.to_mapped[k];
      const bool receive = !peers.from_mapped[k];
      if (receive) {
        copy.bytes.resize(
            static_cast<std::size_t>(exchange.lengths[static_cast<std::size_t>(from)]));
      }
      const auto tag = kBytesTag + static_cast<std::uint32_t>(k + 1);
      // A transport may run a communicator's operations in turn and a send may wait for its
      // receive, so around the ring every other rank sends first and the others receive first:
      // no cycle of ranks all waiting in a send. An edge kept in shared memory is skipped by
      // both of its ends.
      if (send && peers.send_first) exchange.works.push_back(channel->send(view_of(out), to, tag));
      if (receive) {
        exchange.works.push_back(channel->recv(view_of(std::span(copy.bytes)), from, tag));
      }
      if (send && !peers.send_first) exchange.works.push_back(channel->send(view_of(out), to, tag));
    }
  } catch (...) {
    exchange.posting_failed = std::current_exception();
  }
}

RecoveryPlan plan_recovery(const std::vector<std::vector<HeldCopy>>& held,
                           const std::vector<int>& previous_rank, int old_size) {
  TESSERA_CHECK(held.size() == previous_rank.size(),
                "plan_recovery: one list of held copies per rank of the new world");
  const auto n_old = static_cast<std::size_t>(old_size);
  const auto copy_at = [&](std::size_t r, std::int64_t step) -> const HeldCopy* {
    for (const auto& copy : held[r]) {
      if (copy.step == step) return &copy;
    }
    return nullptr;
  };
  const auto can = [&](std::size_t r, std::int64_t step, std::size_t old) {
    const auto* copy = copy_at(r, step);
    return copy != nullptr && (copy->whole || (old < copy->can_give.size() && copy->can_give[old]));
  };

  // Candidate steps, newest first, and the newest step each holder still has: the oldest of
  // those is the newest step every holder has, where a missing state is reported.
  std::vector<std::int64_t> steps;
  std::int64_t held_by_all = std::numeric_limits<std::int64_t>::max();
  for (const auto& copies : held) {
    std::int64_t newest = -1;
    for (const auto& copy : copies) {
      if (copy.step < 0) continue;
      steps.push_back(copy.step);
      newest = std::max(newest, copy.step);
    }
    if (newest >= 0) held_by_all = std::min(held_by_all, newest);
  }
  std::ranges::sort(steps, std::greater<>());

  RecoveryPlan plan;
  plan.giver.assign(n_old, -1);
  for (const auto candidate : steps) {
    // A copy of the whole state at this step: its first holder gives it alone.
    for (std::size_t r = 0; r < held.size(); ++r) {
      const auto* copy = copy_at(r, candidate);
      if (copy != nullptr && copy->whole) {
        plan.step = candidate;
        plan.whole = true;
        std::ranges::fill(plan.giver, static_cast<int>(r));
        return plan;
      }
    }
    std::ranges::fill(plan.giver, -1);
    for (std::size_t old = 0; old < n_old; ++old) {
      // The old rank itself if it survived, else the first holder of a copy.
      for (std::size_t r = 0; r < held.size(); ++r) {
        if (previous_rank[r] == static_cast<int>(old) && can(r, candidate, old)) {
          plan.giver[old] = static_cast<int>(r);
        }
      }
      for (std::size_t r = 0; r < held.size() && plan.giver[old] < 0; ++r) {
        if (can(r, candidate, old)) plan.giver[old] = static_cast<int>(r);
      }
    }
    if (std::ranges::none_of(plan.giver, [](int g) { return g < 0; })) {
      plan.step = candidate;
      return plan;
    }
  }
  // No step is whole: say what is missing at the newest step every holder still has.
  std::ranges::fill(plan.giver, -1);
  for (std::size_t old = 0; old < n_old; ++old) {
    bool found = false;
    for (std::size_t r = 0; r < held.size() && !found; ++r) found = can(r, held_by_all, old);
    if (!found) plan.missing.push_back(static_cast<int>(old));
  }
  TESSERA_CHECK(!plan.missing.empty(),
                "elastic recovery: the newest step every survivor holds is whole, yet no step was "
                "found whole");
  return plan;
}

void CopyRing::prepare_recovery() {
  // Copies that arrived whole before the failure count; the rest are dropped. The old world's
  // channel was aborted with it (or, for an admission, its peers are all alive).
  land_exchange(false);
  read_mapped_copies();
}

int CopyRing::agree_on_old_world_size(Communicator& world, bool holds) const {
  // The old world's size: every survivor that refreshed knows it.
  const auto sizes = gather_i64(world, {holds ? own_.front().world_size : -1});
  std::int64_t old_size = -1;
  for (const auto size : sizes) {
    if (size < 0) continue;
    if (old_size >= 0 && size != old_size) {
      throw TrainingError("elastic recovery: survivors hold copies of worlds of " +
                          std::to_string(old_size) + " and " + std::to_string(size) +
                          " ranks; they did not all come from one world");
    }
    old_size = size;
  }
  if (old_size < 0) {
    throw TrainingError(
        "elastic recovery: no survivor holds a copy of the state (the world failed before its "
        "first refresh)");
  }
  return static_cast<int>(old_size);
}

std::vector<HeldCopy> CopyRing::holdings(int old_size) const {
  const auto n_old = static_cast<std::size_t>(old_size);
  std::vector<HeldCopy> held;
  for (const auto& own : own_) {
    HeldCopy copy{own.position.step, own.whole, std::vector<bool>(n_old)};
    for (std::size_t old = 0; old < n_old; ++old) {
      const bool of_mine = static_cast<int>(old) == rank_;
      const auto it = copies_.find(static_cast<int>(old));
      copy.can_give[old] =
          own.whole || of_mine ||
          (it != copies_.end() && at_step(it->second, own.position.step) != nullptr);
    }
    held.push_back(std::move(copy));
  }
  return held;
}

std::optional<TrainingPosition> CopyRing::position_at(std::int64_t step) const {
  const Snapshot* own = at_step(own_, step);
  if (own == nullptr) return std::nullopt;
  return own->position;
}

void CopyRing::state_of(int old, const RecoveryPlan& plan, Strategy& strategy,
                        const std::function<void(std::span<const std::uint8_t>)>& use) const {
  const Snapshot* snapshot =
      plan.whole || old == rank_ ? at_step(own_, plan.step) : at_step(copies_.at(old), plan.step);
  TESSERA_CHECK(snapshot != nullptr, "elastic recovery: a giver holds no state of its old rank");
  if (!snapshot->live) {
    use(bytes_of(*snapshot));
    return;
  }
  // The live state is of the plan's step (a failed step leaves it so): saved now, once.
  const trace::Span span("copy_save", "run");
  std::vector<std::uint8_t> saved_now;
  PackedCheckpointWriter saved(saved_now, /*replicated_on_every_rank=*/true);
  strategy.save(saved);
  saved.finish();
  use(saved_now);
}

std::vector<std::vector<HeldCopy>> CopyRing::gather_holdings(Communicator& world, bool holds,
                                                             int old_size) const {
  // Each rank's own copies as rows of [step, whole, can give old rank 0, ..., n-1].
  const auto n_old = static_cast<std::size_t>(old_size);
  const std::size_t row = 2 + n_old;
  std::vector<std::int64_t> mine(kOwnCopies * row, 0);
  const auto held_here = holds ? holdings(old_size) : std::vector<HeldCopy>{};
  for (std::size_t j = 0; j < kOwnCopies; ++j) {
    auto* slot = mine.data() + j * row;
    slot[0] = -1;
    if (j >= held_here.size()) continue;
    slot[0] = held_here[j].step;
    slot[1] = held_here[j].whole ? 1 : 0;
    for (std::size_t old = 0; old < n_old; ++old) slot[2 + old] = held_here[j].can_give[old];
  }
  const auto everyone = gather_i64(world, mine);
  std::vector<std::vector<HeldCopy>> held(static_cast<std::size_t>(world.size()));
  for (std::size_t r = 0; r < held.size(); ++r) {
    for (std::size_t j = 0; j < kOwnCopies; ++j) {
      const auto* slot = everyone.data() + (r * kOwnCopies + j) * row;
      if (slot[0] < 0) continue;
      HeldCopy copy{slot[0], slot[1] != 0, std::vector<bool>(n_old)};
      for (std::size_t old = 0; old < n_old; ++old) copy.can_give[old] = slot[2 + old] != 0;
      held[r].push_back(std::move(copy));
    }
  }
  return held;
}

std::shared_ptr<MemoryCheckpoint> CopyRing::exchange_state(Communicator& world,
                                                           const RecoveryPlan& plan, bool holds,
                                                           int old_size, Strategy& strategy,
                                                           TrainingPosition& position) const {
  // The position of the plan's step is on every survivor that holds it; the first one's is the
  // world's. When a copy holds the whole state, its holder alone gives it.
  std::vector<std::uint8_t> given;
  const Snapshot* any = holds && plan.step >= 0 ? at_step(own_, plan.step) : nullptr;
  append_i64(given, any != nullptr ? 1 : 0);
  if (any != nullptr) {
    append_i64(given, any->position.step);
    append_i64(given, any->position.epoch);
    append_i64(given, any->position.samples);
  }
  for (std::size_t old = 0; plan.step >= 0 && old < plan.giver.size(); ++old) {
    if (plan.giver[old] != world.rank()) continue;
    state_of(static_cast<int>(old), plan, strategy, [&](std::span<const std::uint8_t> bytes) {
      append_i64(given, static_cast<std::int64_t>(old));
      append_i64(given, static_cast<std::int64_t>(bytes.size()));
      given.insert(given.end(), bytes.begin(), bytes.end());
    });
    if (plan.whole) break;
  }
  const auto everyone_gave = all_gather_bytes(world, std::move(given));

  auto state = plan.step >= 0 ? std::make_shared<MemoryCheckpoint>(old_size) : nullptr;
  bool have_position = false;
  for (const auto& bytes : everyone_gave) {
    std::size_t at = 0;
    if (read_i64(bytes, at) != 0) {
      const TrainingPosition sent{read_i64(bytes, at), read_i64(bytes, at), read_i64(bytes, at)};
      if (!have_position) position = sent;
      have_position = true;
    }
    while (state && at < bytes.size()) {
      (void)read_i64(bytes, at);  // the old rank: blob names and slices say whose they are
      const auto length = static_cast<std::size_t>(read_i64(bytes, at));
      if (bytes.size() - at < length) {
        throw TransportError("elastic recovery: a rank's state arrived cut", std::nullopt,
                             "elastic state exchange");
      }
      unpack_memory_checkpoint(std::span<const std::uint8_t>(bytes).subspan(at, length), *state);
      at += length;
    }
  }
  TESSERA_CHECK(!state || have_position, "elastic recovery: no survivor sent its position");
  return state;
}

RecoveredState CopyRing::recover(Communicator& world, const std::vector<int>& previous_rank,
                                 Strategy& strategy) {
  TESSERA_CHECK(previous_rank.size() == static_cast<std::size_t>(world.size()),
                "CopyRing::recover: previous_rank must name every rank of the new world");
  prepare_recovery();
  const bool survivor = previous_rank[static_cast<std::size_t>(world.rank())] >= 0;
  const bool holds = survivor && !own_.empty();

  RecoveredState out;
  out.previous_world_size = agree_on_old_world_size(world, holds);
  const auto plan = plan_recovery(gather_holdings(world, holds, out.previous_world_size),
                                  previous_rank, out.previous_world_size);
  out.missing = plan.missing;
  out.state = exchange_state(world, plan, holds, out.previous_world_size, strategy, out.position);
  return out;
}

void CopyRing::clear() noexcept {
  settle();
  own_.clear();
  copies_.clear();
  spare_.clear();
  mapped_.clear();
  area_.reset();
  next_slot_ = 0;
  any_sent_ = false;
  channel_.reset();
  whole_.reset();
  rank_ = -1;
}

}  // namespace tessera::elastic
