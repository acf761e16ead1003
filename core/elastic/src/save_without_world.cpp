#include "save_without_world.hpp"

#include <algorithm>
#include <chrono>
#include <random>
#include <sstream>
#include <vector>

#include "tessera/base/error.hpp"
#include "tessera/runtime/checkpoint.hpp"
#include "tessera/strategy_kit/memory_state.hpp"

namespace tessera::elastic {

namespace {

// A world of live members connects in well under a second, and they say what they hold as soon
// as their connect was refused: this much is allowed however short failure_timeout is.
constexpr Duration kLeastHoldingsWait{2000};

// What one survivor holds, as it tells the others through the store.
struct Holder {
  std::int64_t copies_generation = -1;
  int rank_of_copies = -1;  // -1: holds nothing (a newcomer)
  int old_size = -1;
  std::int64_t newest_on_disk = -1;
  std::uint64_t nonce = 0;
  std::vector<HeldCopy> copies;
  std::vector<TrainingPosition> positions;  // of each copy
};

std::string encode(const Holder& h) {
  std::ostringstream out;
  out << h.copies_generation << ' ' << h.rank_of_copies << ' ' << h.old_size << ' '
      << h.newest_on_disk << ' ' << h.nonce << ' ' << h.copies.size();
  for (std::size_t i = 0; i < h.copies.size(); ++i) {
    const auto& p = h.positions[i];
    out << ' ' << h.copies[i].step << ' ' << (h.copies[i].whole ? 1 : 0) << ' ' << p.epoch << ' '
        << p.samples << ' ';
    for (const bool can : h.copies[i].can_give) out << (can ? '1' : '0');
    if (h.copies[i].can_give.empty()) out << '-';
  }
  return out.str();
}

Holder decode(const std::string& text) {
  std::istringstream in(text);
  Holder h;
  std::size_t count = 0;
  in >> h.copies_generation >> h.rank_of_copies >> h.old_size >> h.newest_on_disk >> h.nonce >>
      count;
  for (std::size_t i = 0; i < count && in; ++i) {
    HeldCopy copy;
    TrainingPosition position;
    int whole = 0;
    std::string bits;
    in >> copy.step >> whole >> position.epoch >> position.samples >> bits;
    copy.whole = whole != 0;
    position.step = copy.step;
    for (const char c : bits) {
      if (c != '-') copy.can_give.push_back(c == '1');
    }
    h.copies.push_back(std::move(copy));
    h.positions.push_back(position);
  }
  TESSERA_CHECK(!in.fail(), "elastic: a survivor's holdings read back malformed: '" + text + "'");
  return h;
}

// Writes what `state` holds through `writer`: the blobs, then the slices.
void replay(const MemoryCheckpoint& state, CheckpointWriter& writer) {
  for (const auto& [name, bytes] : state.blobs()) writer.put(name, bytes);
  const auto slices = state.slices();
  for (std::size_t i = 0; i < slices.size(); ++i) {
    writer.put_slice(slices[i], state.slice_values_view(i));
  }
}

std::int64_t newest_step_on_disk(const std::filesystem::path& dir) {
  try {
    if (const auto reader = open_newest_checkpoint(dir)) return reader->manifest().step;
  } catch (const CheckpointError&) {  // NOLINT(bugprone-empty-catch): superseded by this one
  }
  return -1;
}

// "ok" or why this survivor's part failed, from `action`.
template <class Action>
std::string outcome_of(Action&& action) {
  try {
    action();
    return "ok";
  } catch (const std::exception& e) {
    return std::string("failed: ") + e.what();
  }
}

}  // namespace

SavedWithoutWorld save_without_world(ElasticWorld& elastic, CopyRing& ring,
                                     std::int64_t copies_generation, RunControl& run,
                                     Duration write_bound) {
  const auto& dir = run.checkpoint_dir();
  ring.prepare_recovery();
  Holder mine;
  mine.rank_of_copies = ring.rank_of_copies();
  if (mine.rank_of_copies >= 0) {
    mine.copies_generation = copies_generation;
    mine.old_size = ring.old_world_size();
    mine.copies = ring.holdings(mine.old_size);
    for (const auto& copy : mine.copies) mine.positions.push_back(*ring.position_at(copy.step));
  }
  mine.newest_on_disk = newest_step_on_disk(dir);
  mine.nonce = std::random_device{}();
  const auto& options = elastic.options();
  const auto records = elastic.gather_without_world(
      "holdings", encode(mine),
      deadline_after(std::max(options.failure_timeout, kLeastHoldingsWait)));

  // The holders of the newest copied world; a copy of an older one is no part of the state.
  std::vector<std::optional<Holder>> holders;
  std::int64_t newest = -1;
  for (const auto& record : records) {
    holders.push_back(record ? std::optional<Holder>(decode(*record)) : std::nullopt);
    if (holders.back() && holders.back()->rank_of_copies >= 0)
      newest = std::max(newest, holders.back()->copies_generation);
  }
  const int self = static_cast<int>(
      std::ranges::find_if(records, [&](const auto& r) { return r && *r == encode(mine); }) -
      records.begin());
  const int committer = static_cast<int>(
      std::ranges::find_if(holders, [](const auto& h) { return h.has_value(); }) - holders.begin());
  std::vector<std::vector<HeldCopy>> held(holders.size());
  std::vector<int> previous_rank(holders.size(), -1);
  int old_size = -1;
  std::int64_t newest_on_disk = -1;
  std::vector<TrainingPosition> positions;
  for (std::size_t r = 0; r < holders.size(); ++r) {
    if (!holders[r]) continue;
    newest_on_disk = std::max(newest_on_disk, holders[r]->newest_on_disk);
    if (holders[r]->rank_of_copies < 0 || holders[r]->copies_generation != newest) continue;
    held[r] = holders[r]->copies;
    previous_rank[r] = holders[r]->rank_of_copies;
    old_size = holders[r]->old_size;
    positions.insert(positions.end(), holders[r]->positions.begin(), holders[r]->positions.end());
  }
  SavedWithoutWorld saved;
  if (old_size < 0) {
    saved.problem =
        "no survivor holds a copy of the state (the world failed before its first "
        "refresh)";
    return saved;
  }
  const auto plan = plan_recovery(held, previous_rank, old_size);
  if (plan.step < 0) {
    std::string lost;
    for (const int r : plan.missing) lost += (lost.empty() ? "" : ", ") + std::to_string(r);
    saved.problem = "the state of rank(s) " + lost + " of the " + std::to_string(old_size) +
                    "-rank world and every copy of it were lost with the failed workers";
    return saved;
  }
  saved.step = plan.step;
  if (newest_on_disk >= plan.step) {
    saved.folder = list_checkpoints(dir).back();
    return saved;
  }
  const auto at = *std::ranges::find_if(
      positions, [&](const TrainingPosition& p) { return p.step == plan.step; });

  // Each giver writes the old ranks it gives; the whole state is old rank 0's, the others' empty.
  std::ostringstream temporary;
  temporary << ".tmp-step-" << plan.step << "-from-memory-" << std::hex
            << holders[static_cast<std::size_t>(committer)]->nonce;
  const CheckpointParts parts(dir, plan.step, temporary.str());
  const auto written = outcome_of([&] {
    for (int old = 0; old < old_size; ++old) {
      if (plan.giver[static_cast<std::size_t>(old)] != self) continue;
      ring.state_of(old, plan, run.strategy(), [&](std::span<const std::uint8_t> bytes) {
        MemoryCheckpoint state(old_size, true);
        unpack_memory_checkpoint(bytes, state);
        parts.write_rank(plan.whole ? 0 : old,
                         [&](CheckpointWriter& writer) { replay(state, writer); });
      });
      if (!plan.whole) continue;
      for (int empty = 1; empty < old_size; ++empty) {
        parts.write_rank(empty, [](CheckpointWriter&) {});
      }
      break;
    }
  });
  const auto writes = elastic.gather_without_world("written", written, deadline_after(write_bound));

  std::string committed;
  if (self == committer) {
    std::string missing;
    for (int old = 0; old < old_size; ++old) {
      const auto giver = static_cast<std::size_t>(plan.giver[static_cast<std::size_t>(old)]);
      const auto& said = writes[giver];
      if (said && *said == "ok") continue;
      missing =
          "the survivor that gives rank " + std::to_string(old) + "'s state " +
          (said ? "could not write it (" + *said + ")" : std::string("did not say it wrote it"));
      break;
    }
    committed = missing.empty() ? outcome_of([&] {
      (void)parts.commit(
          old_size,
          run.checkpoint_metadata({at.step, at.epoch, static_cast<std::size_t>(at.samples)}), {});
    })
                                : "failed: " + missing;
    if (committed != "ok") {
      std::error_code ignored;
      std::filesystem::remove_all(parts.temporary(), ignored);
    }
  }
  const auto commits =
      elastic.gather_without_world("committed", committed, deadline_after(write_bound));
  const auto& said = commits[static_cast<std::size_t>(committer)];
  if (said && *said == "ok") {
    saved.folder = parts.final_folder();
    saved.written = true;
  } else {
    saved.problem = said ? said->substr(said->find(' ') + 1)
                         : "the survivor that commits it did not say it did";
  }
  return saved;
}

}  // namespace tessera::elastic
