// Elastic training through the Trainer: ranks (threads over the local transport, meeting in one
// memory store) die in the middle of a step; the survivors notice through the membership
// leases, regroup, rebuild the state from the copies they hold and finish the run. Checked:
// every sample of every epoch trained exactly once, the final parameters equal a run resumed at
// the new world size from the same state, the fallback to a checkpoint when a rank's state
// and all its copies are gone, and, below min_workers, the checkpoint the survivors stop with.
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

#include "copy_ring.hpp"
#include "ddp_strategy.hpp"
#include "ddp_test_support.hpp"
#include "memory_store.hpp"
#include "sgd/sgd.hpp"
#include "tessera/base/error.hpp"
#include "tessera/elastic/elastic_run.hpp"
#include "tessera/runtime/checkpoint.hpp"
#include "tessera/runtime/trainer.hpp"
#include "trainer_test_support.hpp"

namespace tessera {
namespace {

namespace fs = std::filesystem;

thread_local int t_worker = -1;  // the worker (thread) that gathers

// What a worker "dies" with: its thread stops, its ElasticWorld is destroyed (the lease goes).
struct Died {};

// The samples each worker gathered last.
class RecordingDataset final : public testing::RecordingDatasetBase {
 public:
  using RecordingDatasetBase::RecordingDatasetBase;
  [[nodiscard]] std::vector<std::size_t> last(int worker) const {
    const std::lock_guard lock(mutex_);
    return last_.at(worker);
  }

 private:
  void record(std::span<const std::size_t> indices) const override {
    const std::lock_guard lock(mutex_);
    last_[t_worker].assign(indices.begin(), indices.end());
  }
  mutable std::mutex mutex_;
  mutable std::map<int, std::vector<std::size_t>> last_;
};

// A step a worker completed: its number, the world generation it ran in (how many times the
// strategy was reconfigured before it) and the samples.
struct StepRecord {
  std::int64_t step = 0;
  int generation = 0;
  std::vector<std::size_t> samples;
};

// The job's progress as the tests see it: the highest step any worker completed.
struct JobProgress {
  std::atomic<std::int64_t> step{0};
  std::chrono::milliseconds step_pause{0};  // each step takes at least this long
};

// A writer that hands everything to another and asks for one copy of replicated state, as a
// strategy that ignores every_rank_writes_replicated_state (or holds only its shard) saves.
class OneCopyOfReplicatedState final : public CheckpointWriter {
 public:
  explicit OneCopyOfReplicatedState(CheckpointWriter& to) : to_(to) {}
  void put(const std::string& name, std::span<const std::byte> bytes) override {
    to_.put(name, bytes);
  }
  void put_slice(const StateSlice& slice, std::span<const float> values) override {
    to_.put_slice(slice, values);
  }

 private:
  CheckpointWriter& to_;
};

// ddp, recording completed steps, and dying in step `die_at` (0: never), or in the evaluation
// that follows step `die_evaluating_after` (0: never). copies_hold_everything: false saves
// replicated state from rank 0 alone, so a rank's copy holds only its part.
class RecordingStrategy final : public Strategy {
 public:
  RecordingStrategy(std::shared_ptr<const RecordingDataset> data, int worker, std::int64_t die_at,
                    JobProgress* progress = nullptr, bool copies_hold_everything = true,
                    std::int64_t die_evaluating_after = 0)
      : data_(std::move(data)),
        worker_(worker),
        die_at_(die_at),
        die_evaluating_after_(die_evaluating_after),
        progress_(progress),
        copies_hold_everything_(copies_hold_everything) {
    ddp::DdpConfig config;
    config.sync.first_bucket_bytes = 1024;
    config.sync.bucket_cap_bytes = 4096;
    inner_ = std::make_shared<ddp::DdpStrategy>(config);
  }
  void setup(const StrategySetup& setup) override { inner_->setup(setup); }
  StepStats train_step(const Batch& batch, const StepInfo& info) override {
    if (info.step == die_at_) throw Died{};
    const auto stats = inner_->train_step(batch, info);
    steps_.push_back({info.step, generation_, data_->last(worker_)});
    if (progress_ != nullptr) {
      std::this_thread::sleep_for(progress_->step_pause);  // a slow worker, on purpose
      std::int64_t seen = progress_->step.load();
      while (seen < info.step && !progress_->step.compare_exchange_weak(seen, info.step)) {
      }
    }
    return stats;
  }
  StepStats evaluate(const Batch& batch) override {
    if (die_evaluating_after_ > 0 && !steps_.empty() && steps_.back().step == die_evaluating_after_)
      throw Died{};
    return inner_->evaluate(batch);
  }
  void save(CheckpointWriter& writer) override {
    ++saves_;
    if (copies_hold_everything_) {
      inner_->save(writer);
      return;
    }
    OneCopyOfReplicatedState one(writer);
    inner_->save(one);
  }
  void load(const CheckpointReader& reader) override { inner_->load(reader); }
  void reconfigure(std::shared_ptr<Communicator> world, const CheckpointReader& state) override {
    if (die_in_reconfigure_) throw Died{};
    ++generation_;
    inner_->reconfigure(std::move(world), state);
  }
  // Dies in the first reconfiguration: while the survivors of a failure move onto their world.
  void die_in_reconfigure() { die_in_reconfigure_ = true; }
  [[nodiscard]] DataParallelPlacement data_parallel_placement() const override {
    return inner_->data_parallel_placement();
  }
  [[nodiscard]] MemoryReport memory_report() const override { return inner_->memory_report(); }

  [[nodiscard]] const std::vector<StepRecord>& steps() const { return steps_; }
  [[nodiscard]] int saves() const { return saves_; }
  [[nodiscard]] std::vector<float> parameters() const {
    const auto p = inner_->parameters();
    return {p.begin(), p.end()};
  }

 private:
  std::shared_ptr<const RecordingDataset> data_;
  int worker_;
  std::int64_t die_at_;
  std::int64_t die_evaluating_after_;
  JobProgress* progress_;
  bool copies_hold_everything_;
  bool die_in_reconfigure_ = false;
  int generation_ = 0;
  int saves_ = 0;
  std::shared_ptr<ddp::DdpStrategy> inner_;
  std::vector<StepRecord> steps_;
};

// Forwards to `inner` and counts the bytes of point-to-point sends.
class CountingCommunicator : public Communicator {
 public:
  explicit CountingCommunicator(std::shared_ptr<Communicator> inner) : inner_(std::move(inner)) {}
  int rank() const noexcept override { return inner_->rank(); }
  int size() const noexcept override { return inner_->size(); }
  Duration timeout() const noexcept override { return inner_->timeout(); }
  void abort(const std::string& reason) noexcept override { inner_->abort(reason); }
  [[nodiscard]] std::size_t point_to_point_bytes() const { return sent_.load(); }

 protected:
  std::shared_ptr<Work> do_all_reduce(BufferView data, ReduceOp op) override {
    return inner_->all_reduce(data, op);
  }
  std::shared_ptr<Work> do_reduce_scatter(BufferView in, BufferView out, ReduceOp op) override {
    return inner_->reduce_scatter(in, out, op);
  }
  std::shared_ptr<Work> do_all_gather(BufferView in, BufferView out) override {
    return inner_->all_gather(in, out);
  }
  std::shared_ptr<Work> do_broadcast(BufferView data, int root) override {
    return inner_->broadcast(data, root);
  }
  std::shared_ptr<Work> do_send(BufferView data, int peer, std::uint32_t tag) override {
    sent_ += data.bytes();
    return inner_->send(data, peer, tag);
  }
  std::shared_ptr<Work> do_recv(BufferView data, int peer, std::uint32_t tag) override {
    return inner_->recv(data, peer, tag);
  }
  std::shared_ptr<Work> do_barrier() override { return inner_->barrier(); }
  std::unique_ptr<Communicator> do_split(int color, int key) override {
    return std::make_unique<CountingCommunicator>(inner_->split(color, key));
  }

 private:
  std::shared_ptr<Communicator> inner_;
  std::atomic<std::size_t> sent_{0};
};

// A worker's world whose split (the elastic side channel's) runs the exchange the shm
// transport's split runs on the world (an all_gather of one (color, key) pair of int32 per
// rank), waits until every other rank is connecting the child group (the shm transport counts
// each rank's connects in the child's store namespace, "split0/color<c>", before it waits for
// anyone), then dies (Died): exactly after the world was adopted, before the side channel is
// joined, while the others wait for this rank to attach.
class DiesInItsSplit final : public CountingCommunicator {
 public:
  DiesInItsSplit(std::shared_ptr<Communicator> inner, std::shared_ptr<Store> rendezvous,
                 std::atomic<std::chrono::steady_clock::time_point>* died_at)
      : CountingCommunicator(std::move(inner)),
        rendezvous_(std::move(rendezvous)),
        died_at_(died_at) {}

 protected:
  std::unique_ptr<Communicator> do_split(int color, int key) override {
    std::vector<std::int32_t> mine{color, key};
    std::vector<std::int32_t> all(2 * static_cast<std::size_t>(size()));
    all_gather({mine.data(), mine.size(), DType::i32, Device::cpu()},
               {all.data(), all.size(), DType::i32, Device::cpu()})
        ->wait(testing::kTestTimeout);
    PrefixStore child("split0/color" + std::to_string(color), rendezvous_);
    for (int r = 0; r < size(); ++r) {
      if (r != rank())
        (void)child.get("shm/connects/rank" + std::to_string(r), testing::kTestTimeout);
    }
    died_at_->store(std::chrono::steady_clock::now());
    throw Died{};
  }

 private:
  std::shared_ptr<Store> rendezvous_;
  std::atomic<std::chrono::steady_clock::time_point>* died_at_;
};

// A transport whose `victim` worker dies in the split of its `world_number`-th world (the
// job's first is 1), as DiesInItsSplit says; every other world forwards.
class VictimDiesInItsSplit final : public Transport {
 public:
  VictimDiesInItsSplit(std::shared_ptr<Transport> inner, int victim, int world_number)
      : inner_(std::move(inner)), victim_(victim), world_number_(world_number) {}
  // When the victim died; the epoch while it lives.
  [[nodiscard]] std::chrono::steady_clock::time_point died_at() const { return died_at_.load(); }

 protected:
  std::unique_ptr<Communicator> do_connect(std::shared_ptr<Store> store, int rank, int size,
                                           Duration timeout) override {
    auto world = inner_->connect(store, rank, size, timeout);
    if (t_worker == victim_ && ++victim_worlds_ == world_number_) {
      return std::make_unique<DiesInItsSplit>(std::move(world), std::move(store), &died_at_);
    }
    return std::make_unique<CountingCommunicator>(std::move(world));
  }

 private:
  std::shared_ptr<Transport> inner_;
  int victim_;
  int world_number_;
  int victim_worlds_ = 0;  // only the victim's thread counts
  std::atomic<std::chrono::steady_clock::time_point> died_at_{};
};

// A transport whose room runs out after the job's first world, as the shm transport's does
// when /dev/shm fills during a run: every later connect is refused with OutOfMemory, on every
// rank alike (as shm hands rank 0's refusal to the others).
class RoomForOneWorld final : public Transport {
 public:
  RoomForOneWorld(std::shared_ptr<Transport> inner, int first_world_size)
      : inner_(std::move(inner)), first_world_size_(first_world_size) {}
  [[nodiscard]] int refusals() const { return refusals_.load(); }

 protected:
  std::unique_ptr<Communicator> do_connect(std::shared_ptr<Store> store, int rank, int size,
                                           Duration timeout) override {
    if (connects_.fetch_add(1) >= first_world_size_) {
      refusals_.fetch_add(1);
      throw OutOfMemory("shm: a world of " + std::to_string(size) +
                        " ranks needs a shared-memory segment of 3.0 MiB, but /dev/shm has only "
                        "0 B free; free space in /dev/shm");
    }
    return std::make_unique<CountingCommunicator>(
        inner_->connect(std::move(store), rank, size, timeout));
  }

 private:
  std::shared_ptr<Transport> inner_;
  int first_world_size_;
  std::atomic<int> connects_{0};
  std::atomic<int> refusals_{0};
};

std::shared_ptr<const Optimizer> momentum_sgd() {
  return std::make_shared<sgd::SgdOptimizer>(sgd::SgdConfig{0.9F, 0.0F, 0.0F});
}

TrainerOptions options() {
  TrainerOptions o;
  o.epochs = 2;
  o.batch_size = 8;
  o.schedule.base_lr = 0.05F;
  o.seed = 11;
  o.progress = ProgressMode::off;
  return o;
}

ElasticOptions elastic_options(int workers, int copies, int min_workers = 1,
                               Duration join_timeout = Duration(2000),
                               bool share_copies_on_host = true) {
  ElasticOptions o;
  o.share_copies_on_host = share_copies_on_host;
  o.min_workers = min_workers;
  o.max_workers = workers;
  o.copies = copies;
  o.heartbeat = Duration(50);
  o.failure_timeout = Duration(1000);
  o.join_timeout = join_timeout;
  return o;
}

std::shared_ptr<Transport> local_transport() {
  const auto& registry = testing::test_registry();
  return registry.create<Transport>("local",
                                    registry.default_options(PluginKind::transport, "local"));
}

struct WorkerOutcome {
  bool died = false;
  TrainResult result;
  std::shared_ptr<RecordingStrategy> strategy;
  std::exception_ptr error;
};

// Workers that start later: worker w enters once some worker completed step start_after[w].
struct LateStarts {
  std::vector<std::int64_t> start_after;  // one per worker; 0: from the start
  std::chrono::milliseconds step_pause{0};
  std::shared_ptr<Store> store;        // the job's; a fresh memory store when null
  bool copies_hold_everything = true;  // RecordingStrategy's
  int min_workers = 1;
  Duration join_timeout{2000};
  std::vector<std::string> ids;  // the workers' ids; "w<w>" when empty
  // The strategy declares TESSERA_REPLICATED_STATE, as ddp's plugin does (no copies).
  bool replicated_state = false;
  bool share_copies_on_host = true;  // ElasticOptions'; false sends every copy
  // Per worker: it dies in the evaluation after this step (0 or none: never).
  std::vector<std::int64_t> die_evaluating_after;
  // Each worker's own max_workers (a `tessera launch --join -n 1` worker's is 1); empty: the
  // number of workers.
  std::vector<int> max_workers;
  std::vector<int> die_in_reconfigure;   // workers that die in their first reconfiguration
  std::shared_ptr<Transport> transport;  // the job's; the local transport when null
};

// `workers` threads train one elastic run; worker w dies in step die_at[w] (0: never).
std::vector<WorkerOutcome> run_elastic(int workers, const std::vector<std::int64_t>& die_at,
                                       int copies, const TrainerOptions& o,
                                       const std::shared_ptr<RecordingDataset>& data,
                                       const LateStarts& late = {}) {
  const auto transport = late.transport ? late.transport : local_transport();
  const auto store = late.store ? late.store : memory::make_memory_store();
  JobProgress progress;
  progress.step_pause = late.step_pause;
  std::vector<WorkerOutcome> out(static_cast<std::size_t>(workers));
  std::vector<std::thread> threads;
  for (int w = 0; w < workers; ++w) {
    threads.emplace_back([&, w] {
      t_worker = w;
      auto& outcome = out[static_cast<std::size_t>(w)];
      try {
        const auto after =
            late.start_after.empty() ? 0 : late.start_after[static_cast<std::size_t>(w)];
        while (after > 0 && progress.step.load() < after) {
          std::this_thread::sleep_for(std::chrono::milliseconds(1));
        }
        // With workers still to come, the first world forms once the others waited
        // failure_timeout for more (the settle time).
        auto elastic = make_elastic_world(
            transport, store,
            elastic_options(
                late.max_workers.empty() ? workers : late.max_workers[static_cast<std::size_t>(w)],
                copies, late.min_workers, late.join_timeout, late.share_copies_on_host),
            late.ids.empty() ? "w" + std::to_string(w) : late.ids[static_cast<std::size_t>(w)],
            testing::kTestTimeout);
        auto first = elastic->enter(deadline_after(testing::kTestTimeout));
        if (first.finished) return;
        const auto wi = static_cast<std::size_t>(w);
        outcome.strategy = std::make_shared<RecordingStrategy>(
            data, w, die_at[wi], &progress, late.copies_hold_everything,
            wi < late.die_evaluating_after.size() ? late.die_evaluating_after[wi] : 0);
        if (std::ranges::count(late.die_in_reconfigure, w) != 0) {
          outcome.strategy->die_in_reconfigure();
        }
        TrainerComponents parts{first.world, testing::small_mlp(), momentum_sgd(),
                                data,        outcome.strategy,     "ddp"};
        Trainer trainer(o, parts);
        trainer.set_world_source(make_elastic_run(elastic, first, late.replicated_state));
        outcome.result = trainer.run(false);
      } catch (const Died&) {
        outcome.died = true;  // the trainer and the ElasticWorld are gone with the scope
      } catch (...) {
        outcome.error = std::current_exception();
      }
    });
  }
  for (auto& t : threads) t.join();
  return out;
}

void rethrow_errors(const std::vector<WorkerOutcome>& outcomes) {
  for (const auto& o : outcomes) {
    if (o.error) std::rethrow_exception(o.error);
  }
}

// How often each training sample was trained on in steps that count: a step a worker completed
// in generation g counts unless the world after g went on from an earlier step (it was redone).
std::vector<int> counted_samples(const std::vector<WorkerOutcome>& outcomes,
                                 const std::vector<WorldEvent>& events, std::size_t n) {
  std::vector<int> counts(n, 0);
  for (const auto& o : outcomes) {
    for (const auto& record : o.strategy->steps()) {
      const auto g = static_cast<std::size_t>(record.generation);
      if (g < events.size() && record.step > events[g].resumed_at_step) continue;
      for (const auto i : record.samples) ++counts.at(i);
    }
  }
  return counts;
}

// A RunControl for calling a WorldSource's hooks outside a Trainer: only world() is asked.
class WorldOnly final : public RunControl {
 public:
  explicit WorldOnly(std::shared_ptr<Communicator> world) : world_(std::move(world)) {}
  Strategy& strategy() override { throw InvalidArgument("WorldOnly: no strategy"); }
  [[nodiscard]] const std::shared_ptr<Communicator>& world() const override { return world_; }
  [[nodiscard]] DeviceAllocator* memory() const override { return nullptr; }
  [[nodiscard]] const fs::path& checkpoint_dir() const override { return none_; }
  [[nodiscard]] TrainingPosition checkpoint_position(
      const FileCheckpointReader& /*reader*/) const override {
    throw InvalidArgument("WorldOnly: no checkpoints");
  }
  void reconfigure(std::shared_ptr<Communicator> /*world*/,
                   const CheckpointReader& /*state*/) override {
    throw InvalidArgument("WorldOnly: no strategy");
  }
  fs::path save_checkpoint(const TrainingPosition& /*at*/) override {
    throw InvalidArgument("WorldOnly: no checkpoints");
  }
  [[nodiscard]] std::map<std::string, std::string> checkpoint_metadata(
      const TrainingPosition& /*at*/) const override {
    throw InvalidArgument("WorldOnly: no checkpoints");
  }

 private:
  std::shared_ptr<Communicator> world_;
  fs::path none_;
};

// Two members at the run's end, the second `late` behind the first; `second_finishes`: whether it
// reaches the finished hook at all (false: it leaves without, its lease revoked). Returns how
// long the first member's finished() took, and whether it returned before the second got there.
struct FinishTimes {
  std::chrono::steady_clock::duration first_waited{};
  bool first_left_before_second_finished = false;
};
FinishTimes finish_two_members(std::chrono::milliseconds late, bool second_finishes) {
  const auto transport = local_transport();
  const auto store = memory::make_memory_store();
  std::atomic<bool> second_there{false};
  FinishTimes times;
  std::vector<std::thread> threads;
  for (int w = 0; w < 2; ++w) {
    threads.emplace_back([&, w] {
      auto options = elastic_options(2, 1);
      options.failure_timeout = Duration(5000);
      auto elastic = make_elastic_world(transport, store, options, "w" + std::to_string(w),
                                        testing::kTestTimeout);
      const auto first = elastic->enter(deadline_after(testing::kTestTimeout));
      const auto source = make_elastic_run(elastic, first, true);
      WorldOnly run(first.world);
      if (first.world->rank() == 1) {
        std::this_thread::sleep_for(late);
        if (!second_finishes) return;  // ~ElasticWorld revokes its lease
        second_there = true;
        source->finished(run);
        return;
      }
      const auto started = std::chrono::steady_clock::now();
      source->finished(run);
      times.first_left_before_second_finished = !second_there;
      times.first_waited = std::chrono::steady_clock::now() - started;
    });
  }
  for (auto& t : threads) t.join();
  return times;
}

// A member that left the world as soon as its own part of the run's last collective ended failed
// the members still inside it (over ucx their connections closed, over shm its pid was gone):
// they regrouped onto the finished job and exited 1. Every member now reaches the end before any
// leaves, through the store, and one that leaves without reaching it holds nobody for long.
TEST(ElasticTrainer, NoMemberLeavesTheFinishedRunBeforeEveryMemberReachedItsEnd) {
  using std::chrono::milliseconds;
  const auto waited = finish_two_members(milliseconds(300), true);
  EXPECT_FALSE(waited.first_left_before_second_finished);
  EXPECT_GE(waited.first_waited, milliseconds(250));
  EXPECT_LT(waited.first_waited, milliseconds(4000)) << "the round waited out failure_timeout";
  const auto left = finish_two_members(milliseconds(200), false);
  EXPECT_LT(left.first_waited, milliseconds(3000))
      << "a member that left without finishing held the other for its failure_timeout";
}

TEST(ElasticTrainer, ARankThatDiesMidStepIsDroppedAndTheSurvivorsTrainEverySampleOnce) {
  const auto data = std::make_shared<RecordingDataset>(testing::small_synthetic_data(120));
  constexpr std::int64_t kDieAt = 4;
  const auto outcomes = run_elastic(3, {0, 0, kDieAt}, 1, options(), data);
  rethrow_errors(outcomes);
  ASSERT_TRUE(outcomes[2].died);
  for (int w = 0; w < 2; ++w) {
    const auto& result = outcomes[static_cast<std::size_t>(w)].result;
    ASSERT_EQ(result.world_events.size(), 1U) << "worker " << w;
    const auto& event = result.world_events[0];
    EXPECT_EQ(event.generation, 2);
    EXPECT_EQ(event.left, std::vector<std::string>{"w2"});
    EXPECT_TRUE(event.joined.empty());
    EXPECT_EQ(event.world_size, 2);
    EXPECT_EQ(event.state_from, "memory");
    // The copies are refreshed every step: the failed step is redone, none is lost.
    EXPECT_EQ(event.resumed_at_step, kDieAt - 1);
    EXPECT_GE(event.failed_at_step, kDieAt - 1);
    EXPECT_EQ(result.ranks.size(), 2U);  // the summary is the new world's
  }
  // 120 samples, 2 epochs: epoch 1 = 3 steps of 24 at 3 ranks, then 48 samples at 2 ranks (3
  // steps of 16); epoch 2 = 8 steps at 2 ranks.
  EXPECT_EQ(outcomes[0].result.steps, 3 + 3 + 8);
  EXPECT_EQ(outcomes[0].result.losses, outcomes[1].result.losses);
  EXPECT_EQ(counted_samples(outcomes, outcomes[0].result.world_events, 120),
            std::vector<int>(120, 2));
}

// A worker dies in the evaluation that ends epoch 1, after the epoch's last step completed
// everywhere: the survivors go on from that step, which their copies already count as the start
// of epoch 2. Epoch 1 was once left without an evaluation; it gets exactly one.
TEST(ElasticTrainer, AnEpochWhoseEvaluationAWorkerDiedInIsEvaluatedOnce) {
  const auto data = std::make_shared<RecordingDataset>(testing::small_synthetic_data(120));
  const fs::path metrics =
      fs::temp_directory_path() / ("tessera-elastic-eval-" + std::to_string(::getpid()) + ".jsonl");
  fs::remove(metrics);
  auto o = options();
  o.metrics_file = metrics;
  LateStarts how;
  how.die_evaluating_after = {0, 0, 5};  // 5 steps of 24 samples at 3 ranks: epoch 1's last
  const auto outcomes = run_elastic(3, {0, 0, 0}, 1, o, data, how);
  rethrow_errors(outcomes);
  ASSERT_TRUE(outcomes[2].died);
  ASSERT_EQ(outcomes[0].result.world_events.size(), 1U);
  EXPECT_EQ(outcomes[0].result.world_events[0].resumed_at_step, 5);

  std::vector<std::pair<std::int64_t, std::int64_t>> evaluations;  // (epoch, step)
  std::ifstream lines(metrics);
  for (std::string line; std::getline(lines, line);) {
    if (line.find("\"test_accuracy\"") == std::string::npos) continue;
    long long epoch = 0;
    long long step = 0;
    ASSERT_EQ(std::sscanf(line.c_str(), "{\"step\":%lld,\"epoch\":%lld", &step, &epoch), 2) << line;
    evaluations.emplace_back(epoch, step);
  }
  fs::remove(metrics);
  // Epoch 2: 120 samples at 2 ranks, 8 steps of 16 (the last one short).
  const std::vector<std::pair<std::int64_t, std::int64_t>> expected{{1, 5}, {2, 13}};
  EXPECT_EQ(evaluations, expected);
}

// Worker `newcomer`, admitted in the run's one world change (generation 2), went on from the
// members' step with their state: the same steps, losses and parameters from there on, and every
// one of `samples` samples trained once per epoch (2 epochs).
void expect_newcomer_follows_the_members(const std::vector<WorkerOutcome>& outcomes,
                                         std::size_t newcomer, std::size_t samples) {
  const auto& members = outcomes[0].result;
  ASSERT_EQ(members.world_events.size(), 1U);
  const auto& event = members.world_events[0];
  const auto& joiner = outcomes[newcomer].result;
  ASSERT_EQ(joiner.world_events.size(), 1U);
  EXPECT_EQ(joiner.world_events[0].generation, 2);
  EXPECT_EQ(joiner.resumed_from_step, event.resumed_at_step);
  EXPECT_EQ(joiner.steps, members.steps);
  EXPECT_EQ(joiner.rank, static_cast<int>(newcomer));
  const std::vector<double> after_admission(
      members.losses.begin() + static_cast<std::ptrdiff_t>(event.resumed_at_step),
      members.losses.end());
  EXPECT_EQ(joiner.losses, after_admission);
  for (std::size_t w = 1; w < outcomes.size(); ++w) {
    EXPECT_EQ(outcomes[w].strategy->parameters(), outcomes[0].strategy->parameters())
        << "worker " << w;
  }
  EXPECT_EQ(counted_samples(outcomes, members.world_events, samples), std::vector<int>(samples, 2));
}

// Workers 1 and 2 of 3, on 120 samples, both died around step `die_at`: worker 0 went on alone
// from memory at the step before, every sample trained once in each of 2 epochs. Epoch 1: 3 steps
// of 24 at 3 ranks, then 48 samples alone (6 steps of 8); epoch 2: 15 steps.
void expect_worker_0_went_on_alone_from_memory(const std::vector<WorkerOutcome>& outcomes,
                                               std::int64_t die_at) {
  rethrow_errors(outcomes);
  ASSERT_TRUE(outcomes[1].died);
  ASSERT_TRUE(outcomes[2].died);
  const auto& result = outcomes[0].result;
  ASSERT_EQ(result.world_events.size(), 1U);
  const auto& event = result.world_events[0];
  EXPECT_EQ(event.world_size, 1);
  EXPECT_EQ(event.left, (std::vector<std::string>{"w1", "w2"}));
  EXPECT_EQ(event.state_from, "memory");
  EXPECT_EQ(event.resumed_at_step, die_at - 1);
  EXPECT_EQ(result.steps, 3 + 6 + 15);
  EXPECT_EQ(result.ranks.size(), 1U);
  EXPECT_EQ(counted_samples(outcomes, result.world_events, 120), std::vector<int>(120, 2));
}

// A second failure while the survivors of the first move onto their new world: worker 2 dies
// in step 4, worker 1 while the state is being rebuilt. Worker 0 folds the second failure into
// the regroup and trains on alone, every sample once per epoch.
TEST(ElasticTrainer, ASecondFailureDuringTheRegroupIsFoldedIntoIt) {
  const auto data = std::make_shared<RecordingDataset>(testing::small_synthetic_data(120));
  constexpr std::int64_t kDieAt = 4;
  LateStarts late;
  late.die_in_reconfigure = {1};
  const auto outcomes = run_elastic(3, {0, 0, kDieAt}, 1, options(), data, late);
  expect_worker_0_went_on_alone_from_memory(outcomes, kDieAt);
}

// The second failure lands later: after the survivors of the first adopted their new world,
// before every one joined its side channel (the shm transport connects a group of its own for
// it). Worker 2 dies in step 4; worker 1 in the side channel's split of the world after, while
// worker 0 connects that channel and waits for it to attach. Worker 0 folds the second failure
// into the regroup within the regroup's bound (failure_timeout + join_timeout) and trains on
// alone; it once waited out the transport's timeout there (30 s) for a rank that never came.
TEST(ElasticTrainer, ADeathBetweenAdoptingAWorldAndJoiningItsSideChannelIsFoldedIntoTheRegroup) {
  const auto data = std::make_shared<RecordingDataset>(testing::small_synthetic_data(120));
  constexpr std::int64_t kDieAt = 4;
  const auto& registry = testing::test_registry();
  auto shm_options = registry.default_options(PluginKind::transport, "shm");
  auto values = shm_options.values();
  values["timeout"] = std::to_string(testing::kTestTimeout.count()) + "ms";
  const auto transport = std::make_shared<VictimDiesInItsSplit>(
      registry.create<Transport>("shm",
                                 Options(shm_options.section(), shm_options.specs(), values)),
      1, 2);
  LateStarts late;
  late.transport = transport;
  const auto outcomes = run_elastic(3, {0, 0, kDieAt}, 1, options(), data, late);
  const auto after_the_death = std::chrono::steady_clock::now() - transport->died_at();
  expect_worker_0_went_on_alone_from_memory(outcomes, kDieAt);
  const auto bounds = elastic_options(3, 1);
  EXPECT_LT(after_the_death, bounds.failure_timeout + bounds.join_timeout);
}

TEST(ElasticTrainer, AWorkerStartedLaterIsAdmittedAtAStepBoundaryAndReceivesTheState) {
  const auto data = std::make_shared<RecordingDataset>(testing::small_synthetic_data(480));
  LateStarts late;
  late.start_after = {0, 0, 3};
  late.step_pause = std::chrono::milliseconds(10);
  late.store = memory::make_memory_store();
  const auto outcomes = run_elastic(3, {0, 0, 0}, 1, options(), data, late);
  rethrow_errors(outcomes);
  const auto& members = outcomes[0].result;
  ASSERT_EQ(members.world_events.size(), 1U);
  const auto& event = members.world_events[0];
  EXPECT_EQ(event.generation, 2);
  EXPECT_EQ(event.joined, std::vector<std::string>{"w2"});
  EXPECT_TRUE(event.left.empty());
  EXPECT_EQ(event.world_size, 3);
  EXPECT_EQ(event.failed_at_step, -1);  // admitted, nothing failed
  EXPECT_EQ(event.state_from, "memory");
  EXPECT_GE(event.resumed_at_step, 3);
  EXPECT_EQ(members.ranks.size(), 3U);

  expect_newcomer_follows_the_members(outcomes, 2, 480);

  // A worker that comes after the run ended is told so instead of starting one of its own.
  auto late_worker = make_elastic_world(local_transport(), late.store, elastic_options(3, 1), "w3",
                                        testing::kTestTimeout);
  const auto entered = late_worker->enter(deadline_after(testing::kTestTimeout));
  EXPECT_TRUE(entered.finished);
  EXPECT_EQ(entered.world, nullptr);
}

// Workers 0 and 1 train 480 samples; worker 2 starts after step 3 and is admitted, and worker
// `dies` dies in its first reconfiguration: onto the world that admits worker 2.
std::vector<WorkerOutcome> admit_worker_2_while_one_dies_in_reconfigure(int dies) {
  const auto data = std::make_shared<RecordingDataset>(testing::small_synthetic_data(480));
  LateStarts late;
  late.start_after = {0, 0, 3};
  late.step_pause = std::chrono::milliseconds(10);
  late.die_in_reconfigure = {dies};
  auto outcomes = run_elastic(3, {0, 0, 0}, 1, options(), data, late);
  rethrow_errors(outcomes);
  return outcomes;
}

// A member dies while a newcomer is being admitted: worker 2 starts after step 3, and worker 1
// dies in the reconfiguration onto the world that admits it. The newcomer is a member of that
// world by then and regroups with worker 0 as worker 0 does, instead of leaving the run with the
// failure (it once threw out of its trainer's start, which knew no failure path).
TEST(ElasticTrainer, ANewcomerWhoseAdmissionLosesAMemberGoesOnWithTheOthers) {
  const auto outcomes = admit_worker_2_while_one_dies_in_reconfigure(1);
  ASSERT_TRUE(outcomes[1].died);
  const auto& member = outcomes[0].result;
  const auto& newcomer = outcomes[2].result;
  // The admitting world was never adopted: the one change is onto the world after it, which
  // the newcomer joined and worker 1 left since the world before.
  ASSERT_EQ(member.world_events.size(), 1U);
  const auto& event = member.world_events[0];
  EXPECT_EQ(event.generation, 3);
  EXPECT_EQ(event.joined, std::vector<std::string>{"w2"});
  EXPECT_EQ(event.left, std::vector<std::string>{"w1"});
  EXPECT_EQ(event.world_size, 2);
  EXPECT_EQ(event.state_from, "memory");
  ASSERT_EQ(newcomer.world_events.size(), 1U);
  EXPECT_EQ(newcomer.world_events[0].generation, 3);
  EXPECT_EQ(newcomer.world_events[0].joined, event.joined);  // every rank names the same change
  EXPECT_EQ(newcomer.world_events[0].left, event.left);
  EXPECT_EQ(newcomer.resumed_from_step, event.resumed_at_step);
  EXPECT_EQ(newcomer.steps, member.steps);
  EXPECT_EQ(newcomer.rank, 1);
  EXPECT_EQ(outcomes[2].strategy->parameters(), outcomes[0].strategy->parameters());
  EXPECT_EQ(counted_samples(outcomes, member.world_events, 480), std::vector<int>(480, 2));
}

// A `tessera launch --elastic --join -n 1` worker counts only itself: its own max_workers is 1.
// The room it sees in the job, and so whether it takes part in the members' per-step question
// about newcomers, must be the job's, or its collectives fall out of step with theirs.
TEST(ElasticTrainer, ANewcomerStartedWithASmallerMaxWorkersKeepsInStepWithTheJobsLimits) {
  const auto data = std::make_shared<RecordingDataset>(testing::small_synthetic_data(480));
  LateStarts late;
  late.start_after = {0, 0, 3};
  late.step_pause = std::chrono::milliseconds(10);
  late.max_workers = {4, 4, 1};
  const auto outcomes = run_elastic(3, {0, 0, 0}, 1, options(), data, late);
  rethrow_errors(outcomes);
  EXPECT_EQ(outcomes[0].result.world_events.at(0).joined, std::vector<std::string>{"w2"});
  expect_newcomer_follows_the_members(outcomes, 2, 480);
}

// A newcomer that dies right after its admission, while the members move onto the world that
// takes it in: the members regroup without it and go on from the state they held, every sample
// once per epoch.
TEST(ElasticTrainer, ANewcomerKilledRightAfterItsAdmissionLeavesTheMembersTraining) {
  const auto outcomes = admit_worker_2_while_one_dies_in_reconfigure(2);
  ASSERT_TRUE(outcomes[2].died);
  for (std::size_t w = 0; w < 2; ++w) {
    const auto& result = outcomes[w].result;
    ASSERT_FALSE(result.world_events.empty()) << "worker " << w;
    const auto& last = result.world_events.back();
    EXPECT_EQ(last.world_size, 2) << "worker " << w;
    EXPECT_TRUE(last.left.empty()) << "worker " << w;  // both members of the world adopted last
    EXPECT_EQ(last.state_from, "memory") << "worker " << w;
    EXPECT_EQ(result.ranks.size(), 2U) << "worker " << w;
  }
  EXPECT_EQ(outcomes[0].result.losses, outcomes[1].result.losses);
  EXPECT_EQ(outcomes[0].strategy->parameters(), outcomes[1].strategy->parameters());
  EXPECT_EQ(counted_samples(outcomes, outcomes[0].result.world_events, 480),
            std::vector<int>(480, 2));
}

// `ranks` ranks resume from the newest checkpoint in `folder` and train up to max_steps (0: the
// whole run); rank 0's parameters at the end (ddp: every rank's).
std::vector<float> resumed_parameters(const std::shared_ptr<RecordingDataset>& data,
                                      const fs::path& folder, int ranks,
                                      std::int64_t max_steps = 0) {
  auto o = options();
  o.checkpoint_dir = folder;
  o.max_steps = max_steps;
  std::vector<float> parameters;
  testing::run_ranks(ranks, [&](std::shared_ptr<Communicator> world) {
    t_worker = world->rank();
    auto strategy = std::make_shared<RecordingStrategy>(data, world->rank(), 0);
    Trainer(o, {world, testing::small_mlp(), momentum_sgd(), data, strategy, "ddp"}).run(true);
    if (world->rank() == 0) parameters = strategy->parameters();
  });
  return parameters;
}

// `ranks` ranks train `steps` steps from the start and write a checkpoint into `folder`.
void train_and_checkpoint(const std::shared_ptr<RecordingDataset>& data, const fs::path& folder,
                          int ranks, std::int64_t steps) {
  auto o = options();
  o.max_steps = steps;
  o.checkpoint_dir = folder;
  testing::run_ranks(ranks, [&](std::shared_ptr<Communicator> world) {
    t_worker = world->rank();
    auto strategy = std::make_shared<RecordingStrategy>(data, world->rank(), 0);
    Trainer(o, {world, testing::small_mlp(), momentum_sgd(), data, strategy, "ddp"}).run(false);
  });
}

// The error every survivor stopped with: a TrainingError, whose text is returned.
std::vector<std::string> stop_errors(const std::vector<WorkerOutcome>& outcomes,
                                     const std::vector<int>& survivors) {
  std::vector<std::string> messages;
  for (const int w : survivors) {
    const auto& outcome = outcomes[static_cast<std::size_t>(w)];
    if (!outcome.error) {
      ADD_FAILURE() << "worker " << w << " did not stop with an error";
      continue;
    }
    try {
      std::rethrow_exception(outcome.error);
    } catch (const TrainingError& e) {
      messages.emplace_back(e.what());
    } catch (const std::exception& e) {
      ADD_FAILURE() << "worker " << w << " stopped with another error: " << e.what();
    }
  }
  return messages;
}

fs::path test_folder(const std::string& name) {
  auto folder =
      fs::temp_directory_path() / ("tessera-elastic-" + name + "-" + std::to_string(::getpid()));
  fs::remove_all(folder);
  return folder;
}

// options(), writing a checkpoint into `folder` after every second step.
TrainerOptions checkpointing_every_2_steps(const fs::path& folder) {
  auto o = options();
  o.checkpoint_dir = folder;
  o.checkpoint_every = 2;
  return o;
}

TEST(ElasticTrainer, BelowMinWorkersTheSurvivorsWriteACheckpointThatResumesAtTheirWorldSize) {
  constexpr std::int64_t kDieAt = 4;
  const auto data = std::make_shared<RecordingDataset>(testing::small_synthetic_data(120));
  const auto folder = test_folder("stop");
  auto o = options();
  o.checkpoint_dir = folder;
  LateStarts strict;
  strict.min_workers = 3;
  strict.join_timeout = Duration(300);
  const auto outcomes = run_elastic(3, {0, 0, kDieAt}, 1, o, data, strict);
  ASSERT_TRUE(outcomes[2].died);

  // Both survivors stop with one message: how many were left, the limits, where the state is
  // and how to go on from it.
  const auto checkpoint = folder / "step-000000000003";
  for (const auto& message : stop_errors(outcomes, {0, 1})) {
    for (const auto& part : std::vector<std::string>{
             "2 worker(s) left (gone: w2)", "min_workers = 3", "join_timeout = 0.3 s",
             "the survivors' state after step 3 is in " + checkpoint.string(), "--resume"}) {
      EXPECT_NE(message.find(part), std::string::npos) << part << "\n" << message;
    }
    EXPECT_EQ(message.find(".cpp"), std::string::npos) << message;
    EXPECT_EQ(message, stop_errors(outcomes, {0}).front());
  }
  // The checkpoint verifies and is of the two survivors' world, the state of the step the copies
  // were of (the failed step is left to the resumed run).
  ASSERT_EQ(list_checkpoints(folder), std::vector<fs::path>{checkpoint});
  const FileCheckpointReader reader(checkpoint);
  EXPECT_EQ(reader.manifest().step, kDieAt - 1);
  EXPECT_EQ(reader.saved_world_size(), 2);

  // Loaded at their world size it is the state the survivors held, bitwise; resumed there, the
  // run ends where a run that wrote a checkpoint after the same steps and resumed at 2 ends.
  EXPECT_EQ(resumed_parameters(data, folder, 2, kDieAt - 1), outcomes[0].strategy->parameters());
  EXPECT_EQ(resumed_parameters(data, folder, 1, kDieAt - 1), outcomes[1].strategy->parameters());
  const auto finished = resumed_parameters(data, folder, 2);
  const auto reference = test_folder("stop-reference");
  train_and_checkpoint(data, reference, 3, kDieAt - 1);
  EXPECT_EQ(finished, resumed_parameters(data, reference, 2));
  fs::remove_all(reference);
  fs::remove_all(folder);
}

TEST(ElasticTrainer, BelowMinWorkersWithALostShardSaysNoCheckpointCouldBeMadeAndWhichRemains) {
  const auto data = std::make_shared<RecordingDataset>(testing::small_synthetic_data(120));
  const auto folder = test_folder("stop-lost");
  const auto o = checkpointing_every_2_steps(folder);
  // Each rank's copy holds only its own part, and none is kept on another rank (copies 0).
  LateStarts strict;
  strict.copies_hold_everything = false;
  strict.min_workers = 3;
  strict.join_timeout = Duration(300);
  const auto outcomes = run_elastic(3, {0, 0, 3}, 0, o, data, strict);
  ASSERT_TRUE(outcomes[2].died);
  const auto kept = folder / "step-000000000002";
  for (const auto& message : stop_errors(outcomes, {0, 1})) {
    for (const auto& part : std::vector<std::string>{
             "2 worker(s) left", "min_workers = 3",
             "no consistent checkpoint could be made from memory", "rank(s) 2 of the 3-rank world",
             "copies = 0", "the newest checkpoint on disk, " + kept.string() + " (step 2)",
             "--resume"}) {
      EXPECT_NE(message.find(part), std::string::npos) << part << "\n" << message;
    }
  }
  // What was on disk is as it was: the checkpoint of step 2 alone, whole.
  EXPECT_EQ(list_checkpoints(folder), std::vector<fs::path>{kept});
  EXPECT_EQ(FileCheckpointReader(kept).saved_world_size(), 3);
  fs::remove_all(folder);
}

// The shm transport refuses the survivors' new world for lack of room in /dev/shm (a
// transport whose room runs out after the first world, as shm's when /dev/shm fills).
// Every survivor meets that refusal, and so would every world formed again: they stop at once
// (not after regrouping until failure_timeout + join_timeout, 1 s + 60 s here). With no world to
// gather the state in, they write what their memory holds through the job's store: a checkpoint
// of the step the copies were of, the one the 3-rank world would have written there, which
// resumes at any world size. `copies_hold_everything`: false, each rank's copy holds its own part
// alone, so every survivor writes the old ranks it gives.
void expect_no_room_stops_with_a_checkpoint_from_memory(bool copies_hold_everything) {
  constexpr std::int64_t kDieAt = 4;
  const auto data = std::make_shared<RecordingDataset>(testing::small_synthetic_data(120));
  const auto folder = test_folder("no-room");
  const auto o = checkpointing_every_2_steps(folder);
  LateStarts late;
  const auto room = std::make_shared<RoomForOneWorld>(local_transport(), 3);
  late.transport = room;
  late.join_timeout = Duration(60000);
  late.copies_hold_everything = copies_hold_everything;
  const auto started = std::chrono::steady_clock::now();
  const auto outcomes = run_elastic(3, {0, 0, kDieAt}, 1, o, data, late);
  ASSERT_TRUE(outcomes[2].died);
  // Well within the regroup's bound: a refusal is not retried.
  EXPECT_LT(std::chrono::steady_clock::now() - started, std::chrono::seconds(30));
  const auto kept = folder / "step-000000000002";
  const auto from_memory = folder / "step-000000000003";
  for (const auto& message : stop_errors(outcomes, {0, 1})) {
    for (const auto& part : std::vector<std::string>{
             "elastic: the run stopped after step 3: its next world could not be formed: shm: a "
             "world of 2 ranks needs a shared-memory segment of 3.0 MiB, but /dev/shm has only 0 "
             "B free",
             "the survivors' state after step 3, written from their memory through the job's "
             "store, is in " +
                 from_memory.string(),
             "go on with `tessera train --resume`"}) {
      EXPECT_NE(message.find(part), std::string::npos) << part << "\n" << message;
    }
    EXPECT_EQ(message, stop_errors(outcomes, {0}).front());
  }
  // One refusal per survivor: neither tried another world.
  EXPECT_EQ(room->refusals(), 2);
  ASSERT_EQ(list_checkpoints(folder), (std::vector<fs::path>{kept, from_memory}));
  const FileCheckpointReader reader(from_memory);
  EXPECT_EQ(reader.manifest().step, kDieAt - 1);
  EXPECT_EQ(reader.saved_world_size(), 3);  // the world whose state the copies were

  // Loaded at 1 or 2 ranks, it is the state a checkpoint written after the same steps by the
  // 3 ranks holds, bitwise; resumed at 2, the run ends where one resumed from that one ends.
  const auto reference = test_folder("no-room-reference");
  train_and_checkpoint(data, reference, 3, kDieAt - 1);
  const FileCheckpointReader written_by_the_world(reference / "step-000000000003");
  EXPECT_EQ(reader.manifest().metadata, written_by_the_world.manifest().metadata);
  for (const int ranks : {1, 2}) {
    EXPECT_EQ(resumed_parameters(data, folder, ranks, kDieAt - 1),
              resumed_parameters(data, reference, ranks, kDieAt - 1))
        << ranks << " rank(s)";
  }
  EXPECT_EQ(resumed_parameters(data, folder, 2), resumed_parameters(data, reference, 2));
  fs::remove_all(reference);
  fs::remove_all(folder);
}

TEST(ElasticTrainer, ANewWorldRefusedForLackOfRoomStopsTheSurvivorsWithACheckpointFromMemory) {
  expect_no_room_stops_with_a_checkpoint_from_memory(true);
}

TEST(ElasticTrainer, ANewWorldRefusedForLackOfRoomWritesEachOldRanksPartFromItsGiver) {
  expect_no_room_stops_with_a_checkpoint_from_memory(false);
}

TEST(ElasticTrainer, BelowMinWorkersWithoutACheckpointDirTheErrorSaysNothingWasWritten) {
  const auto data = std::make_shared<RecordingDataset>(testing::small_synthetic_data(120));
  LateStarts strict;
  strict.min_workers = 3;
  strict.join_timeout = Duration(300);
  const auto outcomes = run_elastic(3, {0, 0, 3}, 1, options(), data, strict);
  ASSERT_TRUE(outcomes[2].died);
  for (const auto& message : stop_errors(outcomes, {0, 1})) {
    for (const auto& part :
         std::vector<std::string>{"2 worker(s) left", "min_workers = 3",
                                  "no checkpoint was written: [train] checkpoint_dir "
                                  "(--train.checkpoint_dir) is not set"}) {
      EXPECT_NE(message.find(part), std::string::npos) << part << "\n" << message;
    }
  }
}

TEST(ElasticTrainer, FinalParametersEqualARunResumedAtTheNewWorldSizeFromTheSameState) {
  constexpr std::int64_t kDieAt = 5;
  const auto data = std::make_shared<RecordingDataset>(testing::small_synthetic_data(120));
  const auto failed = run_elastic(3, {0, kDieAt, 0}, 1, options(), data);
  rethrow_errors(failed);
  ASSERT_EQ(failed[0].result.world_events.size(), 1U);
  ASSERT_EQ(failed[0].result.world_events[0].resumed_at_step, kDieAt - 1);

  // The same state by another road: 3 ranks train kDieAt - 1 steps and write a checkpoint,
  // then 2 ranks resume from it and train to the end.
  const fs::path folder =
      fs::temp_directory_path() / ("tessera-elastic-test-" + std::to_string(::getpid()));
  fs::remove_all(folder);
  auto first = options();
  first.max_steps = kDieAt - 1;
  first.checkpoint_dir = folder;
  testing::run_ranks(3, [&](std::shared_ptr<Communicator> world) {
    t_worker = world->rank();
    auto strategy = std::make_shared<RecordingStrategy>(data, world->rank(), 0);
    Trainer(first, {world, testing::small_mlp(), momentum_sgd(), data, strategy, "ddp"}).run(false);
  });
  auto rest = options();
  rest.checkpoint_dir = folder;
  std::vector<std::vector<float>> resumed(2);
  testing::run_ranks(2, [&](std::shared_ptr<Communicator> world) {
    t_worker = world->rank();
    auto strategy = std::make_shared<RecordingStrategy>(data, world->rank(), 0);
    Trainer(rest, {world, testing::small_mlp(), momentum_sgd(), data, strategy, "ddp"}).run(true);
    resumed[static_cast<std::size_t>(world->rank())] = strategy->parameters();
  });
  fs::remove_all(folder);

  EXPECT_EQ(failed[0].strategy->parameters(), resumed[0]);
  EXPECT_EQ(failed[2].strategy->parameters(), resumed[1]);
}

TEST(ElasticTrainer, WithoutCopiesAFailureGoesOnFromTheNewestCheckpointAndSaysWhich) {
  const auto data = std::make_shared<RecordingDataset>(testing::small_synthetic_data(120));
  const fs::path folder =
      fs::temp_directory_path() / ("tessera-elastic-ckpt-test-" + std::to_string(::getpid()));
  fs::remove_all(folder);
  auto o = options();
  o.checkpoint_dir = folder;
  o.checkpoint_every = 2;
  // Each rank's copy holds only its own part, and none is kept on another rank (copies 0).
  LateStarts parts;
  parts.copies_hold_everything = false;
  const auto outcomes = run_elastic(3, {7, 0, 0}, 0, o, data, parts);
  rethrow_errors(outcomes);
  const auto& event = outcomes[1].result.world_events.at(0);
  EXPECT_EQ(event.resumed_at_step, 6);
  EXPECT_NE(event.state_from.find("step-000000000006"), std::string::npos) << event.state_from;
  EXPECT_EQ(counted_samples(outcomes, outcomes[1].result.world_events, 120),
            std::vector<int>(120, 2));

  // No checkpoint either: the survivors stop, naming what was lost and what to set.
  fs::remove_all(folder);
  auto bare = options();
  const auto lost = run_elastic(3, {0, 0, 3}, 0, bare, data, parts);
  ASSERT_TRUE(lost[0].error);
  try {
    std::rethrow_exception(lost[0].error);
  } catch (const TrainingError& e) {
    EXPECT_NE(std::string(e.what()).find("copies"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("checkpoint_dir"), std::string::npos) << e.what();
  }
  fs::remove_all(folder);
}

// ddp's ranks hold the same state and each saves it whole into its own copy: without copies on
// other ranks and without a checkpoint, the survivors still go on from memory, at the failed
// step, and train every sample once.
TEST(ElasticTrainer, ReplicatedStateComesBackFromAnySurvivorsOwnCopy) {
  const auto data = std::make_shared<RecordingDataset>(testing::small_synthetic_data(120));
  const auto outcomes = run_elastic(3, {0, 0, 3}, 0, options(), data);
  rethrow_errors(outcomes);
  const auto& event = outcomes[0].result.world_events.at(0);
  EXPECT_EQ(event.resumed_at_step, 2);  // step 3 failed: redone from the state after step 2
  EXPECT_EQ(event.state_from, "memory");
  EXPECT_EQ(counted_samples(outcomes, outcomes[0].result.world_events, 120),
            std::vector<int>(120, 2));
}

// A strategy that declares its state replicated (ddp's TESSERA_REPLICATED_STATE) is never copied:
// the survivors' live state is the state after the last step they completed. The run goes on as
// one that kept copies, to the last bit, and the state is saved once, at the recovery, by the
// survivor that gives it.
TEST(ElasticTrainer, ReplicatedStateIsNotCopiedAndTheSurvivorsGoOnFromTheirLiveState) {
  const auto data = std::make_shared<RecordingDataset>(testing::small_synthetic_data(120));
  constexpr std::int64_t kDieAt = 4;
  LateStarts live;
  live.replicated_state = true;
  const auto outcomes = run_elastic(3, {0, 0, kDieAt}, 1, options(), data, live);
  rethrow_errors(outcomes);
  const auto copied = run_elastic(3, {0, 0, kDieAt}, 1, options(), data);
  rethrow_errors(copied);
  ASSERT_TRUE(outcomes[2].died);
  int saves = 0;
  for (int w = 0; w < 2; ++w) {
    const auto& o = outcomes[static_cast<std::size_t>(w)];
    ASSERT_EQ(o.result.world_events.size(), 1U) << "worker " << w;
    const auto& event = o.result.world_events[0];
    EXPECT_EQ(event.state_from, "memory");
    EXPECT_EQ(event.resumed_at_step, kDieAt - 1) << "no completed step is lost";
    EXPECT_EQ(o.result.steps, 3 + 3 + 8);
    saves += o.strategy->saves();
    EXPECT_GE(copied[static_cast<std::size_t>(w)].strategy->saves(), 14)
        << "with copies, every step saves";
  }
  EXPECT_EQ(saves, 1) << "one survivor saves its live state, once, when it gives it";
  EXPECT_EQ(outcomes[0].strategy->parameters(), copied[0].strategy->parameters());
  EXPECT_EQ(outcomes[1].strategy->parameters(), copied[1].strategy->parameters());
  EXPECT_EQ(counted_samples(outcomes, outcomes[0].result.world_events, 120),
            std::vector<int>(120, 2));
}

// One survivor completed the failed step (its last all-reduce had everyone's part) and another
// did not: they are one step apart, and both go on from the state of the one ahead.
TEST(ElasticTrainer, SurvivorsALiveStepApartGoOnFromTheOneAhead) {
  const auto data = std::make_shared<RecordingDataset>(testing::small_synthetic_data(120));
  const auto trained = [&](std::int64_t steps) {
    std::shared_ptr<RecordingStrategy> out;
    auto o = options();
    o.max_steps = steps;
    testing::run_ranks(1, [&](std::shared_ptr<Communicator> world) {
      t_worker = 0;
      out = std::make_shared<RecordingStrategy>(data, 0, 0);
      Trainer(o, {world, testing::small_mlp(), momentum_sgd(), data, out, "ddp"}).run(false);
    });
    return out;
  };
  const auto behind = trained(2);
  const auto ahead = trained(3);
  ASSERT_NE(behind->parameters(), ahead->parameters());

  std::vector<elastic::RecoveredState> got(2);
  testing::run_ranks(2, [&](std::shared_ptr<Communicator> world) {
    const int rank = world->rank();
    RecordingStrategy& strategy = rank == 0 ? *behind : *ahead;
    elastic::CopyRing ring(1, {}, /*replicated_state=*/true);
    ring.refresh(strategy, world, {rank == 0 ? 2 : 3, 0, rank == 0 ? 16 : 24});
    got[static_cast<std::size_t>(rank)] = ring.recover(*world, {0, 1}, strategy);
  });
  EXPECT_EQ(ahead->saves(), 1);
  EXPECT_EQ(behind->saves(), 0);
  for (const auto& recovered : got) {
    ASSERT_TRUE(recovered.state);
    EXPECT_EQ(recovered.position.step, 3);
    EXPECT_EQ(recovered.position.samples, 24);
    EXPECT_TRUE(recovered.missing.empty());
  }
  testing::run_ranks(1, [&](std::shared_ptr<Communicator> world) {
    t_worker = 0;
    RecordingStrategy fresh(data, 0, 0);
    fresh.setup({world, testing::small_mlp(), momentum_sgd(), 11});
    fresh.load(*got[0].state);
    EXPECT_EQ(fresh.parameters(), ahead->parameters());
  });
}

// The copy ring visits the failure domains in turn, so each rank's copy lives on another node
// wherever there is one.
TEST(CopyRingOrder, VisitsTheFailureDomainsInTurn) {
  using V = std::vector<std::int64_t>;
  const auto order = [](const V& domains) { return elastic::copy_ring_order(domains); };
  EXPECT_EQ(order({7, 7, 9, 9}), (std::vector<int>{0, 2, 1, 3}));
  EXPECT_EQ(order({7, 7, 7, 9}), (std::vector<int>{0, 3, 1, 2}));
  EXPECT_EQ(order({7, 9, 7, 9}), (std::vector<int>{0, 1, 2, 3}));
  EXPECT_EQ(order({5, 5, 5}), (std::vector<int>{0, 1, 2}));     // one node: the plain ring
  EXPECT_EQ(order({-1, -2, -3}), (std::vector<int>{0, 1, 2}));  // each a node of its own
  EXPECT_EQ(order({3, 1, 2, 3, 1, 2}), (std::vector<int>{0, 1, 2, 3, 4, 5}));
  EXPECT_EQ(order({3, 3, 1, 1, 2, 2}), (std::vector<int>{0, 2, 4, 1, 3, 5}));
}

TEST(CopyRingOrder, AWorkersFailureDomainIsTheNodeOfItsLaunchersId) {
  EXPECT_EQ(failure_domain_of("n0.w1"), "n0");
  EXPECT_EQ(failure_domain_of("n12.w0.r3"), "n12");
  EXPECT_EQ(failure_domain_of("gpu-7.west-4242.w2"), "gpu-7.west-4242");
  EXPECT_EQ(failure_domain_of("w2"), "w2");
  EXPECT_EQ(failure_domain_of("rank3"), "rank3");
}

// Two nodes of two workers; a sharded state with one copy of each rank's part. Node n1 dies
// whole in one step: every part of its ranks has its copy on n0 (a ring in rank order would
// have kept rank 2's copy on rank 3, dead with it), so the survivors go on from memory.
class ElasticCopies : public ::testing::TestWithParam<bool> {};

TEST_P(ElasticCopies, AWholeNodeThatDiesTakesNoStateItsCopiesDoNotOutlive) {
  const auto data = std::make_shared<RecordingDataset>(testing::small_synthetic_data(120));
  LateStarts late;
  late.copies_hold_everything = false;
  late.share_copies_on_host = GetParam();
  late.ids = {"n0.w0", "n0.w1", "n1.w0", "n1.w1"};
  const auto outcomes = run_elastic(4, {0, 0, 3, 3}, 1, options(), data, late);
  rethrow_errors(outcomes);
  ASSERT_TRUE(outcomes[2].died);
  ASSERT_TRUE(outcomes[3].died);
  for (int w = 0; w < 2; ++w) {
    const auto& result = outcomes[static_cast<std::size_t>(w)].result;
    ASSERT_FALSE(result.world_events.empty()) << "worker " << w;
    const auto& event = result.world_events.back();
    EXPECT_EQ(event.world_size, 2) << "worker " << w;
    EXPECT_EQ(event.state_from, "memory") << "worker " << w;
    // From memory, at a step the copies were whole: the copies of the newest refreshes may have
    // been on their way, or dropped when a dying thread's ring aborted the side channel (a
    // killed process aborts nothing), so this does not pin how many steps are redone.
    EXPECT_GE(event.resumed_at_step, 0) << "worker " << w;
    EXPECT_LE(event.resumed_at_step, 2) << "worker " << w;
  }
  std::vector<std::string> left;
  for (const auto& event : outcomes[0].result.world_events) {
    left.insert(left.end(), event.left.begin(), event.left.end());
  }
  std::ranges::sort(left);
  EXPECT_EQ(left, (std::vector<std::string>{"n1.w0", "n1.w1"}));
  EXPECT_EQ(counted_samples(outcomes, outcomes[0].result.world_events, 120),
            std::vector<int>(120, 2));
}

// A rank's part of a sharded state, copied to the next rank of the ring: kept in shared memory
// on this host (nothing sent), or sent; either way a rank whose process is gone comes back from
// its copy, at the newest refresh.
TEST_P(ElasticCopies, ACopyOutlivesTheRankThatWroteIt) {
  const bool shared = GetParam();
  const auto data = std::make_shared<RecordingDataset>(testing::small_synthetic_data(120));
  std::vector<std::shared_ptr<RecordingStrategy>> strategies(2);
  std::vector<std::unique_ptr<elastic::CopyRing>> rings(2);
  std::vector<std::size_t> sent(2, 0);
  testing::run_ranks(2, [&](std::shared_ptr<Communicator> world) {
    const auto r = static_cast<std::size_t>(world->rank());
    t_worker = world->rank();
    auto counted = std::make_shared<CountingCommunicator>(world);
    // Rank 0 alone writes the replicated state: each rank's save holds a part of its own.
    strategies[r] = std::make_shared<RecordingStrategy>(data, world->rank(), 0, nullptr, false);
    // Another seed than the fresh strategy's below: the state that comes back is told apart.
    strategies[r]->setup({world, testing::small_mlp(), momentum_sgd(), 99});
    rings[r] = std::make_unique<elastic::CopyRing>(1, "", false, shared);
    for (std::int64_t step = 1; step <= 3; ++step) {
      rings[r]->refresh(*strategies[r], counted, {step, 0, 8 * step});
    }
    sent[r] = counted->point_to_point_bytes();
  });
  if (shared) {
    EXPECT_EQ(sent[0] + sent[1], 0U) << "the copies stay in shared memory";
  } else {
    EXPECT_GT(sent[0], 0U) << "the copies are sent";
  }
  // Rank 0's process ends: its ring and strategy go. Rank 1, alone, gets rank 0's part back.
  const auto expected = strategies[0]->parameters();
  rings[0].reset();
  strategies[0].reset();
  elastic::RecoveredState got;
  testing::run_ranks(1, [&](std::shared_ptr<Communicator> world) {
    got = rings[1]->recover(*world, {1}, *strategies[1]);
  });
  ASSERT_TRUE(got.state) << "missing " << got.missing.size();
  if (shared) {
    EXPECT_EQ(got.position.step, 3) << "a copy in shared memory is there once written";
  } else {
    EXPECT_GE(got.position.step, 2) << "a sent copy lands during the next step, or is dropped";
  }
  EXPECT_EQ(got.previous_world_size, 2);
  testing::run_ranks(1, [&](std::shared_ptr<Communicator> world) {
    t_worker = 0;
    RecordingStrategy fresh(data, 0, 0);
    fresh.setup({world, testing::small_mlp(), momentum_sgd(), 11});
    ASSERT_NE(fresh.parameters(), expected);
    fresh.load(*got.state);
    EXPECT_EQ(fresh.parameters(), expected);
  });
  EXPECT_FALSE(std::filesystem::exists("/dev/shm") &&
               std::ranges::any_of(std::filesystem::directory_iterator("/dev/shm"),
                                   [](const auto& entry) {
                                     const auto name = entry.path().filename().string();
                                     return name.starts_with("tessera-replica-") &&
                                            name.find("-" + std::to_string(::getpid()) + "-") !=
                                                std::string::npos;
                                   }))
      << "every area's name is removed once the ranks that keep its copies opened it";
}

INSTANTIATE_TEST_SUITE_P(SharedOrSent, ElasticCopies, ::testing::Values(true, false),
                         [](const ::testing::TestParamInfo<bool>& param) {
                           return param.param ? "kept_in_shared_memory" : "sent";
                         });

}  // namespace
}  // namespace tessera
