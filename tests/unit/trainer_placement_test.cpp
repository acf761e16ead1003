// The trainer deals data by the strategy's data-parallel placement, counts metrics from
// reporting ranks only, and deals the rest of an epoch over a new world after a world change.
#include <gtest/gtest.h>

#include <map>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

#include "ddp_strategy.hpp"
#include "ddp_test_support.hpp"
#include "memory_store.hpp"
#include "mlp/mlp_model.hpp"
#include "sgd/sgd.hpp"
#include "tessera/base/error.hpp"
#include "tessera/runtime/trainer.hpp"
#include "tessera/strategy_kit/micro_batches.hpp"
#include "trainer_test_support.hpp"

namespace tessera {
namespace {

thread_local int t_rank = -1;  // the world rank of the thread that gathers

// The synthetic data set, recording the training samples each rank's thread gathers.
class PerRankRecordingDataset final : public testing::RecordingDatasetBase {
 public:
  using RecordingDatasetBase::RecordingDatasetBase;
  // Uses of each training sample by the given ranks together.
  [[nodiscard]] std::vector<int> counts(const std::vector<int>& ranks) const {
    const std::lock_guard lock(mutex_);
    std::vector<int> counts(size(Split::train), 0);
    for (const int r : ranks) {
      const auto it = seen_.find(r);
      if (it == seen_.end()) continue;
      for (const auto i : it->second) ++counts.at(i);
    }
    return counts;
  }

 private:
  void record(std::span<const std::size_t> indices) const override {
    const std::lock_guard lock(mutex_);
    auto& seen = seen_[t_rank];
    seen.insert(seen.end(), indices.begin(), indices.end());
  }
  mutable std::mutex mutex_;
  mutable std::map<int, std::vector<std::size_t>> seen_;
};

TrainerOptions options() {
  TrainerOptions o;
  o.epochs = 1;
  o.batch_size = 8;
  o.schedule.base_lr = 0.05F;
  o.seed = 11;
  o.progress = ProgressMode::off;
  return o;
}

// Two world ranks forming one replica, as the tensor-parallel halves of one model would: both
// compute every row of the replica's share; rank 0 reports. Rank 1 returns numbers that would
// show in the result if the trainer counted it. Trains nothing.
class OneReplicaOfTwoRanks final : public Strategy {
 public:
  explicit OneReplicaOfTwoRanks(bool both_report = false) : both_report_(both_report) {}
  void setup(const StrategySetup& setup) override { world_ = setup.world; }
  StepStats train_step(const Batch& batch, const StepInfo&) override {
    const auto rows = batch_rows(batch.inputs);
    return {0.5, reporting() ? rows : 0, reporting() ? rows : 0, 1.0, false};
  }
  StepStats evaluate(const Batch& batch) override {
    const auto rows = batch_rows(batch.inputs);
    if (reporting()) evaluated_ += rows;
    // Rank 1's rows would halve the accuracy and raise the loss if they were counted.
    return reporting() ? StepStats{1.0, rows, rows, 0.0, false}
                       : StepStats{9.0, 0, rows, 0.0, false};
  }
  void save(CheckpointWriter&) override {}
  void load(const CheckpointReader&) override {}
  void reconfigure(std::shared_ptr<Communicator> new_world, const CheckpointReader&) override {
    world_ = std::move(new_world);
  }
  [[nodiscard]] DataParallelPlacement data_parallel_placement() const override {
    return {0, 1, both_report_ || reporting()};
  }
  [[nodiscard]] MemoryReport memory_report() const override { return {}; }
  [[nodiscard]] std::size_t evaluated_rows() const { return evaluated_; }

 private:
  [[nodiscard]] bool reporting() const { return world_->rank() == 0; }
  bool both_report_;
  std::shared_ptr<Communicator> world_;
  std::size_t evaluated_ = 0;
};

TEST(TrainerPlacement, RanksOfOneReplicaSeeTheSameSamplesAndMetricsCountOnce) {
  const auto data = std::make_shared<PerRankRecordingDataset>(testing::small_synthetic_data(100));
  std::vector<TrainResult> results(2);
  std::vector<std::size_t> evaluated(2);
  testing::run_ranks(2, [&](std::shared_ptr<Communicator> world) {
    t_rank = world->rank();
    auto strategy = std::make_shared<OneReplicaOfTwoRanks>();
    TrainerComponents parts{
        world,    testing::small_mlp(), std::make_shared<sgd::SgdOptimizer>(sgd::SgdConfig{}), data,
        strategy, "one_replica"};
    Trainer trainer(options(), parts);
    results[static_cast<std::size_t>(t_rank)] = trainer.run(false);
    evaluated[static_cast<std::size_t>(t_rank)] = strategy->evaluated_rows();
  });
  // One replica of batch 8: 13 steps over 100 samples, each sample once on each rank.
  for (int r = 0; r < 2; ++r) {
    EXPECT_EQ(data->counts({r}), std::vector<int>(100, 1)) << "rank " << r;
    EXPECT_EQ(results[static_cast<std::size_t>(r)].steps, 13);
    // Rank 1's evaluation (accuracy 0, loss 9) is not counted.
    EXPECT_DOUBLE_EQ(results[static_cast<std::size_t>(r)].test_accuracy, 1.0);
    EXPECT_DOUBLE_EQ(results[static_cast<std::size_t>(r)].test_loss, 1.0);
  }
  EXPECT_EQ(evaluated[0], 30U);  // the whole test split, once
}

TEST(TrainerPlacement, AReplicaWithTwoReportingRanksIsRefused) {
  std::vector<std::string> errors(2);
  testing::run_ranks(2, [&](std::shared_ptr<Communicator> world) {
    TrainerComponents parts{world,
                            testing::small_mlp(),
                            std::make_shared<sgd::SgdOptimizer>(sgd::SgdConfig{}),
                            testing::small_synthetic_data(100),
                            std::make_shared<OneReplicaOfTwoRanks>(true),
                            "one_replica"};
    Trainer trainer(options(), parts);
    try {
      (void)trainer.run(false);
    } catch (const InvalidArgument& e) {
      errors[static_cast<std::size_t>(world->rank())] = e.what();
    }
  });
  for (const auto& e : errors) {
    EXPECT_NE(e.find("strategy 'one_replica' has 2 ranks reporting metrics for 1 data-parallel "
                     "replicas"),
              std::string::npos)
        << e;
  }
}

TEST(TrainerWorldChange, ThreeRanksBecomingTwoMidEpochSeeEverySampleOncePerEpoch) {
  const auto data = std::make_shared<PerRankRecordingDataset>(testing::small_synthetic_data(100));
  const auto& registry = testing::test_registry();
  auto defaults = registry.default_options(PluginKind::transport, "local");
  const auto transport = registry.create<Transport>("local", defaults);
  const auto new_store = memory::make_memory_store();
  constexpr std::int64_t kChangeAfter = 2;

  std::vector<TrainResult> results(3);
  std::vector<int> providers_called(3, 0);
  testing::run_ranks(3, [&](std::shared_ptr<Communicator> world) {
    const int rank = world->rank();
    t_rank = rank;
    auto o = options();
    o.epochs = 2;
    TrainerComponents parts{world,
                            testing::small_mlp(),
                            std::make_shared<sgd::SgdOptimizer>(sgd::SgdConfig{0.9F, 0.0F, 0.0F}),
                            data,
                            std::make_shared<ddp::DdpStrategy>(ddp::DdpConfig{}),
                            "ddp"};
    Trainer trainer(o, parts);
    trainer.set_world_plan([&, rank](std::int64_t steps_done) -> std::optional<PlannedChange> {
      ++providers_called[static_cast<std::size_t>(rank)];
      if (steps_done != kChangeAfter) return std::nullopt;
      if (rank == 2) return PlannedChange{nullptr};
      // The thread keeps its rank: world ranks 0 and 1 (new ranks 1 and 0 would do as well).
      return PlannedChange{transport->connect(new_store, rank, 2, testing::kTestTimeout)};
    });
    results[static_cast<std::size_t>(rank)] = trainer.run(false);
  });

  // Epoch 1: 2 steps of 24 samples at 3 ranks, the other 52 at 2 ranks (16, 16, 16, 4);
  // epoch 2: 100 samples at 2 ranks, 7 steps.
  EXPECT_EQ(data->counts({0, 1, 2}), std::vector<int>(100, 2));
  EXPECT_TRUE(results[2].left_world);
  EXPECT_EQ(results[2].steps, kChangeAfter);
  EXPECT_EQ(providers_called[2], 2);
  for (int r = 0; r < 2; ++r) {
    const auto& result = results[static_cast<std::size_t>(r)];
    EXPECT_FALSE(result.left_world);
    EXPECT_EQ(result.steps, 13) << "rank " << r;
    EXPECT_EQ(result.ranks.size(), 2U);  // summaries from the new world
  }
  // Both new ranks still hold equal losses: one step is one all-reduced loss.
  EXPECT_EQ(results[0].losses, results[1].losses);
}

}  // namespace
}  // namespace tessera
