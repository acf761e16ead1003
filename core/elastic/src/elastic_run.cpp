// An elastic run: the WorldSource that keeps copies of the state as the run goes, regroups the
// survivors after a failure, admits newcomers at step boundaries and stops with a checkpoint
// below min_workers (docs/training.md, "Elastic training").
#include "tessera/elastic/elastic_run.hpp"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <ctime>
#include <memory>
#include <optional>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include "copy_ring.hpp"
#include "save_without_world.hpp"
#include "tessera/base/error.hpp"
#include "tessera/base/trace.hpp"
#include "tessera/runtime/checkpoint.hpp"
#include "tessera/strategy_kit/host_values.hpp"

namespace tessera {
namespace {

using Clock = std::chrono::steady_clock;

std::string format_number(double value) {
  std::ostringstream text;
  text << value;
  return text.str();
}

std::string listed(const std::vector<std::string>& ids, const char* separator = ", ") {
  std::string text;
  for (const auto& id : ids) text += (text.empty() ? "" : separator) + id;
  return text;
}

// "the state of rank(s) 2, 3 of the 4-rank world and every copy of it (copies = 1) were lost
// with the failed workers": why a recovery found no state in memory.
std::string lost_state(const elastic::RecoveredState& recovered, int copies) {
  std::string lost;
  for (const int r : recovered.missing) lost += (lost.empty() ? "" : ", ") + std::to_string(r);
  return "the state of rank(s) " + lost + " of the " +
         std::to_string(recovered.previous_world_size) +
         "-rank world and every copy of it (copies = " + std::to_string(copies) +
         ") were lost with the failed workers";
}

// What --resume would go on from in `dir`, for a message that says nothing new was written.
std::string newest_checkpoint_note(const std::filesystem::path& dir) {
  try {
    const auto reader = open_newest_checkpoint(dir);
    if (!reader) return "there is no checkpoint in " + dir.string() + " to resume from either";
    return "the newest checkpoint on disk, " + reader->folder().string() + " (step " +
           std::to_string(reader->manifest().step) +
           "), is unchanged: `tessera train --resume` goes on from it";
  } catch (const CheckpointError& e) {
    return std::string("and the newest checkpoint on disk does not verify: ") + e.what();
  }
}

elastic::TrainingPosition ring_position(const TrainingPosition& at) {
  return {at.step, at.epoch, static_cast<std::int64_t>(at.samples)};
}

TrainingPosition run_position(const elastic::TrainingPosition& at) {
  return {at.step, at.epoch, static_cast<std::size_t>(at.samples)};
}

// The line rank 0 prints for each new world, on standard error.
void print_event(const WorldEvent& event) {
  const auto names = [](const std::vector<std::string>& ids) {
    const auto text = listed(ids, ",");
    return text.empty() ? std::string("-") : text;
  };
  const auto now = std::chrono::system_clock::now();
  const std::time_t seconds = std::chrono::system_clock::to_time_t(now);
  std::tm local{};
  ::localtime_r(&seconds, &local);
  char clock[16];
  std::strftime(clock, sizeof clock, "%H:%M:%S", &local);
  const auto ms =
      std::chrono::duration_cast<std::chrono::milliseconds>(now.time_since_epoch()).count() % 1000;
  const std::string what = event.failed_at_step < 0
                               ? "admitted at step " + std::to_string(event.resumed_at_step)
                               : "failed at step " + std::to_string(event.failed_at_step) +
                                     ", going on from step " +
                                     std::to_string(event.resumed_at_step);
  std::fprintf(stderr,
               "elastic: %s.%03lld generation %lld: %d worker(s); left %s; joined %s; %s (%s); "
               "%.2f s\n",
               clock, static_cast<long long>(ms), static_cast<long long>(event.generation),
               event.world_size, names(event.left).c_str(), names(event.joined).c_str(),
               what.c_str(), event.state_from.c_str(), event.seconds);
  std::fflush(stderr);
}

class ElasticRun final : public WorldSource {
 public:
  ElasticRun(std::shared_ptr<ElasticWorld> elastic, const Regrouping& entered,
             bool replicated_state)
      : elastic_(std::move(elastic)),
        replicated_state_(replicated_state),
        ring_(new_ring()),
        copies_generation_(entered.generation),
        adopting_generation_(entered.generation) {
    if (entered.joins_running_job()) {
      joining_ = entered;
    } else {
      adopted_members_ = entered.members;
    }
  }

  std::shared_ptr<Communicator> setup_world(std::shared_ptr<Communicator> given) override {
    // A worker entering a running job sets its strategy up alone, then receives the state.
    return joining_ ? elastic_->private_world() : std::move(given);
  }

  [[nodiscard]] bool joins_running_run() const override { return joining_.has_value(); }

  std::optional<WorldChange> start(RunControl& run, const TrainingPosition& at) override {
    if (joining_) {
      const auto started = Clock::now();
      try {
        return adopt(run, *std::exchange(joining_, std::nullopt), -1, started);
      } catch (const TransportError& e) {
        return regroup_and_adopt(run, e.what(), -1, started);
      } catch (const Timeout& e) {
        return regroup_and_adopt(run, e.what(), -1, started);
      }
    }
    refresh(run, at, true);  // the first copies, and the side channel they travel on
    return std::nullopt;
  }

  void step_completed(RunControl& run, const TrainingPosition& next) override {
    // A worker woken after the others went on without it must not record the step it finished
    // (its rank 0 would append to the job's metrics after the run's end): it learns it is gone.
    elastic_->confirm_membership();
    refresh(run, next, false);
  }

  std::optional<WorldChange> at_boundary(RunControl& run, const TrainingPosition& next,
                                         bool inside_epoch) override {
    // Newcomers enter inside an epoch, so that the epoch's end is evaluated as usual.
    if (!inside_epoch || !elastic_->newcomers_waiting()) return std::nullopt;
    const auto started = Clock::now();
    const trace::Span span("elastic_admission", "run", {{"step", next.step}});
    const auto& options = elastic_->options();
    // Every member's own state at this step is what the newcomers receive.
    if (next.step % options.copy_every != 0) refresh(run, next, true);
    return adopt(run,
                 elastic_->admit(deadline_after(options.failure_timeout + options.join_timeout)),
                 -1, started);
  }

  WorldChange failed(RunControl& run, const Error& failure, const TrainingPosition& at) override {
    // Memory that cannot be had (a new world's shared memory, a side channel's) is refused to
    // every worker alike: no regroup would get past it.
    if (const auto* refused = dynamic_cast<const OutOfMemory*>(&failure)) {
      stop_without_room(run, *refused, at.step);
    }
    // A peer that died, stalled or left shows as one of these; anything else is the run's own.
    if (dynamic_cast<const TransportError*>(&failure) == nullptr &&
        dynamic_cast<const Timeout*>(&failure) == nullptr) {
      throw;  // NOLINT(misc-throw-by-value-catch-by-reference): the failure being handled
    }
    const trace::Span span("elastic_recovery", "run", {{"step", at.step}});
    return regroup_and_adopt(run, failure.what(), at.step, Clock::now());
  }

  void adopted(RunControl& run, const TrainingPosition& at, WorldEvent* event) override {
    // The new world's copies are made at once, so that a second failure right away finds them.
    // Until every part of them is made, the old world's stay: a member that dies during this
    // first refresh leaves the others the copies they recovered from.
    auto old_ring = std::exchange(ring_, new_ring());
    try {
      refresh(run, at, true);
    } catch (...) {
      ring_->clear();
      ring_ = std::move(old_ring);
      throw;
    }
    old_ring->clear();
    copies_generation_ = adopting_generation_;
    adopted_members_ = std::move(adopting_members_);
    regroup_deadline_.reset();
    if (event == nullptr) return;
    event->seconds = std::chrono::duration<double>(Clock::now() - started_).count();
    if (run.world()->rank() == 0) print_event(*event);
  }

  void finished(RunControl& run) override {
    // No member leaves the world before every member is out of the run's last collective: one
    // that left as soon as its own part of it ended (its lease revoked, its connections closed)
    // failed the members still inside it, who regrouped onto the finished job and exited 1
    // (join2/ucx/zero2 of the fault campaign). They meet through the store, which those
    // departures do not touch, for at most failure_timeout; a member that dies meanwhile is
    // left out of the round, and a store that fails here changes nothing the run did.
    try {
      (void)elastic_->gather_without_world("finished", "",
                                           deadline_after(elastic_->options().failure_timeout));
    } catch (const Error&) {  // NOLINT(bugprone-empty-catch): the run itself is complete
    }
    // Newcomers still waiting to enter learn that there is nothing left to join.
    if (run.world()->rank() == 0) elastic_->finish();
  }

 private:
  // Refreshes the copies of the state when `at` is on the copy_every grid (or always, with
  // force); for a strategy with replicated state, notes the step its live state is of, every
  // time (nothing is copied).
  void refresh(RunControl& run, const TrainingPosition& at, bool force) {
    if (ring_->replicated_state()) {
      ring_->refresh(run.strategy(), run.world(), ring_position(at));
      return;
    }
    if (!force && at.step % elastic_->options().copy_every != 0) return;
    const trace::Span span("copy_refresh", "run", {{"step", at.step}});
    ring_->refresh(run.strategy(), elastic_->side_channel(), ring_position(at));
  }

  [[nodiscard]] std::unique_ptr<elastic::CopyRing> new_ring() const {
    const auto& options = elastic_->options();
    return std::make_unique<elastic::CopyRing>(options.copies, elastic_->failure_domain(),
                                               replicated_state_, options.share_copies_on_host);
  }

  // Regroups the survivors after `reason` and moves onto their world. A member that fails while
  // that world is connected or the state is gathered (a second failure, a newcomer killed right
  // after its admission) is folded in: the others regroup again without it, until the deadline
  // (failure_timeout + join_timeout, within which the below-min_workers stop also falls).
  WorldChange regroup_and_adopt(RunControl& run, std::string reason, std::int64_t failed_at_step,
                                Clock::time_point started) {
    const auto& options = elastic_->options();
    // One bound for a failure and every failure folded into it, also those that strike after
    // this returned, while the trainer moves onto the world (it asks again): until a world is
    // adopted, the first regroup's deadline holds.
    if (!regroup_deadline_) {
      regroup_deadline_ = deadline_after(options.failure_timeout + options.join_timeout);
    }
    const Deadline deadline = *regroup_deadline_;
    for (;;) {
      try {
        return adopt(run, elastic_->regroup(reason, deadline), failed_at_step, started);
      } catch (const TransportError& e) {
        if (Clock::now() >= deadline) throw;
        reason = e.what();
      } catch (const Timeout& e) {
        if (Clock::now() >= deadline) throw;
        reason = e.what();
      } catch (const OutOfMemory& e) {
        stop_without_room(run, e, failed_at_step);
      }
    }
  }

  // The new world could not be had for lack of memory (a shm segment /dev/shm cannot hold):
  // unlike a member's failure, every survivor met the same refusal (the shm transport hands rank
  // 0's to all), and every world formed again would meet it too, so the job stops now rather
  // than regroup until the deadline. With no world to gather the state in, the survivors write
  // it into checkpoint_dir through the store (save_without_world), and the message names it.
  [[noreturn]] void stop_without_room(RunControl& run, const OutOfMemory& refusal,
                                      std::int64_t failed_at_step) {
    const auto& dir = run.checkpoint_dir();
    const std::string why =
        "elastic: the run stopped" +
        (failed_at_step >= 0 ? " after step " + std::to_string(failed_at_step) : std::string()) +
        ": its next world could not be formed: " + refusal.what() +
        "; no world of these workers can be, so they stop instead of regrouping; ";
    if (dir.empty()) {
      throw TrainingError(why +
                          "no checkpoint was written: [train] checkpoint_dir "
                          "(--train.checkpoint_dir) is not set, so the survivors' state is lost");
    }
    std::string outcome;
    try {
      const auto saved = elastic::save_without_world(*elastic_, *ring_, copies_generation_, run,
                                                     run.world()->timeout());
      if (saved.written) {
        outcome = "the survivors' state after step " + std::to_string(saved.step) +
                  ", written from their memory through the job's store, is in " +
                  saved.folder->string();
      } else if (saved.folder) {
        outcome = "nothing new was written: the survivors' state after step " +
                  std::to_string(saved.step) + " is as old as the newest checkpoint, " +
                  saved.folder->string();
      } else {
        outcome = "no checkpoint could be made from memory: " + saved.problem + "; " +
                  newest_checkpoint_note(dir);
      }
      if (saved.folder) {
        outcome +=
            ": go on with `tessera train --resume` (the same config and checkpoint_dir, "
            "any number of workers, once /dev/shm has room)";
      }
    } catch (const Error& e) {
      outcome =
          "no checkpoint was written: saving the survivors' state through the job's store "
          "failed (" +
          std::string(e.what()) + "); " + newest_checkpoint_note(dir);
    }
    throw TrainingError(why + outcome);
  }

  // For each rank of `world`, its rank in the world whose state the copies are of (-1: it holds
  // none, a newcomer). Asked of the ranks themselves rather than read from the membership:
  // generations formed in between that failed before they were adopted (a member died while
  // they connected or gathered the state) hold no state and do not count.
  [[nodiscard]] std::vector<int> ranks_in_copied_world(RunControl& run, Communicator& world) const {
    std::int64_t mine[2] = {ring_->rank_of_copies() < 0 ? -1 : copies_generation_,
                            ring_->rank_of_copies()};
    std::vector<std::int64_t> all(2 * static_cast<std::size_t>(world.size()));
    all_gather_host(world, run.memory(), {mine, 2, DType::i64, Device::cpu()},
                    {all.data(), all.size(), DType::i64, Device::cpu()});
    std::int64_t newest = -1;
    for (std::size_t r = 0; r < all.size(); r += 2) newest = std::max(newest, all[r]);
    std::vector<int> ranks;
    for (std::size_t r = 0; r < all.size(); r += 2) {
      // A copy of an older world than the others' is no part of the state they go on from.
      ranks.push_back(all[r] == newest && newest >= 0 ? static_cast<int>(all[r + 1]) : -1);
    }
    return ranks;
  }

  // Who left since the world last adopted, through every generation formed in between (a
  // newcomer adopted none, and a worker left out of the world knows none of its members: the
  // membership's previous world).
  [[nodiscard]] std::vector<std::string> left_since_adopted(const Regrouping& regroup) const {
    if (adopted_members_.empty() || regroup.members.empty()) return regroup.left;
    std::vector<std::string> left;
    for (const auto& id : adopted_members_) {
      if (std::ranges::count(regroup.members, id) == 0) left.push_back(id);
    }
    return left;
  }

  // Who joined since the world whose state the copies are: the members that hold none of it
  // (ranks_in_copied_world's -1), so that a newcomer admitted to a generation that failed before
  // the run moved onto it is still named in the change onto the world after it, by every rank.
  [[nodiscard]] static std::vector<std::string> joined_since_copied(const Regrouping& regroup) {
    std::vector<std::string> joined;
    for (std::size_t r = 0; r < regroup.members.size() && r < regroup.previous_rank.size(); ++r) {
      if (regroup.previous_rank[r] < 0) joined.push_back(regroup.members[r]);
    }
    return joined;
  }

  // The change onto `regroup`'s world, the members and newcomers of it together: the state of
  // the world before, from memory or else the newest checkpoint.
  WorldChange adopt(RunControl& run, Regrouping regroup, std::int64_t failed_at_step,
                    Clock::time_point started) {
    if (regroup.stopping) stop_below_min_workers(run, regroup, failed_at_step);
    if (regroup.finished) {
      throw TrainingError(
          "elastic: the other workers finished the run while this one moved to generation " +
          std::to_string(regroup.generation));
    }
    started_ = started;
    adopting_generation_ = regroup.generation;
    const auto& options = elastic_->options();
    WorldEvent event;
    event.failed_at_step = failed_at_step;
    event.generation = regroup.generation;
    adopting_members_ = regroup.members;
    event.left = left_since_adopted(regroup);
    event.world_size = regroup.world->size();
    regroup.previous_rank = ranks_in_copied_world(run, *regroup.world);
    event.joined = joined_since_copied(regroup);
    const auto recovered = ring_->recover(*regroup.world, regroup.previous_rank, run.strategy());
    if (recovered.state) {
      event.state_from = "memory";
      return {regroup.world, recovered.state, run_position(recovered.position), std::move(event)};
    }
    const auto why = "elastic: " + lost_state(recovered, options.copies);
    const auto& dir = run.checkpoint_dir();
    std::shared_ptr<const FileCheckpointReader> reader =
        dir.empty() ? nullptr : open_newest_checkpoint(dir);
    if (!reader) {
      throw TrainingError(why +
                          ", and there is no checkpoint to fall back to; set [train] "
                          "checkpoint_dir and checkpoint_every, or raise [elastic] "
                          "copies");
    }
    const auto at = run.checkpoint_position(*reader);
    event.state_from = reader->folder().string();
    if (regroup.world->rank() == 0) {
      std::fprintf(stderr, "%s; going on from the newest checkpoint, %s (step %lld)\n", why.c_str(),
                   event.state_from.c_str(), static_cast<long long>(at.step));
    }
    return {regroup.world, std::move(reader), at, std::move(event)};
  }

  // Fewer than min_workers were left at join_timeout (`regroup` is stopping). The survivors
  // rebuild the state from memory and write it into checkpoint_dir (unless the newest checkpoint
  // there is as new), then each throws TrainingError saying where it is and how to resume, or
  // why none could be written and which checkpoint remains.
  [[noreturn]] void stop_below_min_workers(RunControl& run, const Regrouping& regroup,
                                           std::int64_t failed_at_step) {
    const auto& options = elastic_->options();
    const auto& dir = run.checkpoint_dir();
    const auto seconds = std::chrono::duration<double>(options.join_timeout).count();
    const auto left = left_since_adopted(regroup);
    const std::string why =
        "elastic: the run stopped" +
        (failed_at_step >= 0 ? " after step " + std::to_string(failed_at_step) : std::string()) +
        ": " +
        (regroup.world ? std::to_string(regroup.world->size()) + " worker(s) left"
                       : std::string("too few workers left")) +
        (left.empty() ? std::string() : " (gone: " + listed(left) + ")") +
        ", fewer than min_workers = " + std::to_string(options.min_workers) +
        ", and no newcomer came within join_timeout = " + format_number(seconds) + " s; ";
    const std::string next_time =
        "; to ride out such losses, start more workers (tessera launch --elastic --join, "
        "--max-restarts), lower [elastic] min_workers (--min-workers) or raise "
        "join_timeout";
    if (!regroup.world) {
      throw TrainingError(
          why +
          "this worker regrouped after the other survivors had stopped without "
          "it and wrote nothing" +
          (dir.empty() ? std::string() : "; they save the state into " + dir.string()) + next_time);
    }
    if (dir.empty()) {
      throw TrainingError(why +
                          "no checkpoint was written: [train] checkpoint_dir "
                          "(--train.checkpoint_dir) is not set, so the survivors' state is lost; "
                          "set it to keep the state of a run that stops" +
                          next_time);
    }
    const auto resume = [&](const std::string& state, const std::filesystem::path& folder) {
      return why + state + " is in " + folder.string() +
             ": go on with `tessera train --resume` (the same config and checkpoint_dir, any "
             "number of workers from min_workers = " +
             std::to_string(options.min_workers) + ")" + next_time;
    };
    std::string outcome;
    try {
      const auto recovered = ring_->recover(
          *regroup.world, ranks_in_copied_world(run, *regroup.world), run.strategy());
      if (!recovered.state) {
        outcome = why + "no consistent checkpoint could be made from memory: " +
                  lost_state(recovered, options.copies) + "; " + newest_checkpoint_note(dir) +
                  next_time;
      } else {
        const auto at = run_position(recovered.position);
        // A checkpoint as new is kept as it is (the same state), one newer too: --resume takes
        // the newest, so an older one written now would only mislead. Rank 0 looks, for everyone.
        std::int64_t newest = -1;
        if (regroup.world->rank() == 0) {
          try {
            if (const auto reader = open_newest_checkpoint(dir)) newest = reader->manifest().step;
          } catch (const CheckpointError&) {  // NOLINT(bugprone-empty-catch): a damaged one is
                                              // superseded by the one written now
          }
        }
        broadcast_host(*regroup.world, run.memory(), {&newest, 1, DType::i64, Device::cpu()}, 0);
        if (newest >= at.step) {
          outcome =
              resume("nothing new was written: the survivors' state after step " +
                         std::to_string(at.step) + (newest == at.step ? "" : ", or a newer one,"),
                     list_checkpoints(dir).back());
        } else {
          run.reconfigure(regroup.world, *recovered.state);
          outcome = resume("the survivors' state after step " + std::to_string(at.step),
                           run.save_checkpoint(at));
        }
      }
    } catch (const Error& e) {
      // A survivor failed while the state was gathered or written: what is on disk stays as it
      // was.
      outcome = why + "no checkpoint was written: saving the survivors' state failed (" + e.what() +
                "); " + newest_checkpoint_note(dir) + next_time;
    }
    throw TrainingError(outcome);
  }

  std::shared_ptr<ElasticWorld> elastic_;
  bool replicated_state_;
  std::unique_ptr<elastic::CopyRing> ring_;
  std::int64_t copies_generation_;    // of the world whose state ring_'s copies are
  std::int64_t adopting_generation_;  // of the world being moved onto
  // The members of the world whose state ring_'s copies are, and of the one being moved onto.
  std::vector<std::string> adopted_members_;
  std::vector<std::string> adopting_members_;
  std::optional<Deadline> regroup_deadline_;  // of the regroups since the world last adopted
  std::optional<Regrouping> joining_;         // the running job's world this worker entered
  Clock::time_point started_;                 // of the change being adopted
};

}  // namespace

std::shared_ptr<WorldSource> make_elastic_run(std::shared_ptr<ElasticWorld> elastic,
                                              const Regrouping& entered, bool replicated_state) {
  TESSERA_CHECK(elastic != nullptr, "make_elastic_run needs an ElasticWorld");
  return std::make_shared<ElasticRun>(std::move(elastic), entered, replicated_state);
}

}  // namespace tessera
