// Strategy::reconfigure: a world of 3 ranks trains, shrinks to 2 between steps, and every
// strategy continues from state exchanged in memory exactly as a fresh 2-rank run continues
// from a checkpoint of the same state on disk.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstring>
#include <filesystem>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "ddp_strategy.hpp"
#include "ddp_test_support.hpp"
#include "tessera/runtime/checkpoint.hpp"
#include "tessera/strategy_kit/memory_state.hpp"
#include "zero3_strategy.hpp"
#include "zero_strategy.hpp"
#include "zero_test_support.hpp"

namespace tessera {
namespace {

namespace fs = std::filesystem;
using testing::kTestTimeout;

enum class Kind { ddp, zero1, zero2, zero3 };

std::string name_of(Kind kind) {
  switch (kind) {
    case Kind::ddp: return "ddp";
    case Kind::zero1: return "zero1";
    case Kind::zero2: return "zero2";
    case Kind::zero3: return "zero3";
  }
  return "?";
}

std::unique_ptr<Strategy> make(Kind kind) {
  if (kind == Kind::ddp) {
    ddp::DdpConfig config;
    config.sync.first_bucket_bytes = 8192;
    config.sync.bucket_cap_bytes = 32768;
    return std::make_unique<ddp::DdpStrategy>(config);
  }
  if (kind == Kind::zero3) return std::make_unique<zero3::Zero3Strategy>(zero3::Zero3Config{});
  zero::ZeroConfig config;
  config.stage = kind == Kind::zero1 ? zero::ZeroStage::one : zero::ZeroStage::two;
  config.first_bucket_bytes = 16384;  // several buckets, so pieces move between ranks
  config.bucket_cap_bytes = 32768;
  return std::make_unique<zero::ZeroStrategy>(config);
}

// Collective for zero3 (it gathers the shards).
std::vector<float> full_parameters(Strategy& strategy, Kind kind, std::size_t total) {
  if (kind == Kind::ddp) {
    const auto p = dynamic_cast<ddp::DdpStrategy&>(strategy).parameters();
    return {p.begin(), p.end()};
  }
  if (kind == Kind::zero3) return dynamic_cast<zero3::Zero3Strategy&>(strategy).gather_parameters();
  const auto p = dynamic_cast<zero::ZeroStrategy&>(strategy).parameters().first(total);
  return {p.begin(), p.end()};
}

constexpr std::size_t kBatch = 8;  // per rank
constexpr int kStepsBefore = 3;

// Step `step` (from 1) of rank `rank` in a world of `world`: consecutive rows, a fresh block of
// the training split per step.
StepStats train(Strategy& strategy, std::int64_t step, int rank, int world) {
  static const auto data = testing::zero_test_data();
  const std::size_t global = kBatch * static_cast<std::size_t>(world);
  const auto first =
      (static_cast<std::size_t>(step) * 32 + static_cast<std::size_t>(rank) * kBatch);
  const auto rows = testing::consecutive(first % 2000, kBatch);
  return strategy.train_step(data->gather(Split::train, rows), StepInfo{step, 1e-3F, global});
}

// The local transport, which joins any number of worlds of threads, one store per world.
std::shared_ptr<Transport> local_transport() {
  const auto& registry = testing::test_registry();
  auto defaults = registry.default_options(PluginKind::transport, "local");
  auto values = defaults.values();
  values["timeout"] = "30s";
  return registry.create<Transport>("local", Options(defaults.section(), defaults.specs(), values));
}

void run_threads(int n, const std::function<void(int)>& body) {
  std::vector<std::exception_ptr> errors(static_cast<std::size_t>(n));
  std::vector<std::thread> threads;
  for (int r = 0; r < n; ++r) {
    threads.emplace_back([&, r] {
      try {
        body(r);
      } catch (...) {
        errors[static_cast<std::size_t>(r)] = std::current_exception();
      }
    });
  }
  for (auto& t : threads) t.join();
  for (auto& e : errors) {
    if (e) std::rethrow_exception(e);
  }
}

class Reconfigure : public ::testing::TestWithParam<Kind> {
 protected:
  void SetUp() override {
    root_ = fs::temp_directory_path() /
            ("tessera-reconfigure-test-" + std::to_string(::getpid()) + "-" + name_of(GetParam()));
    fs::remove_all(root_);
  }
  void TearDown() override { fs::remove_all(root_); }
  fs::path root_;
};

TEST_P(Reconfigure, ThreeRanksShrunkToTwoContinueAsATwoRankRunLoadedFromTheSameState) {
  const Kind kind = GetParam();
  const auto model = testing::zero_test_mlp();
  const std::size_t total = FlatLayout::of(*model).total;
  const auto transport = local_transport();
  const auto old_store = make_memory_store();
  const auto new_store = make_memory_store();

  // 3 ranks train, save the state into memory and to disk, then ranks 0 and 1 go on as a world
  // of 2 and rank 2 leaves.
  std::vector<std::vector<float>> reconfigured(2);
  fs::path written;
  run_threads(3, [&](int rank) {
    auto old_world = transport->connect(old_store, rank, 3, kTestTimeout);
    auto strategy = make(kind);
    strategy->setup({old_world, model, testing::zero_test_adam(), 11});
    for (int s = 1; s <= kStepsBefore; ++s) train(*strategy, s, rank, 3);

    const auto state = gather_state_in_memory(*strategy, *old_world);
    EXPECT_EQ(state->saved_world_size(), 3);
    const auto folder = write_checkpoint(
        root_, kStepsBefore, {}, *old_world, [&](CheckpointWriter& w) { strategy->save(w); },
        {{}, 1}, kTestTimeout);
    if (rank == 0) written = folder;
    if (rank == 2) return;

    std::shared_ptr<Communicator> new_world = transport->connect(new_store, rank, 2, kTestTimeout);
    strategy->reconfigure(new_world, *state);
    // The old world's communicator is released: only this test still holds it.
    EXPECT_EQ(old_world.use_count(), 1) << "rank " << rank;
    const auto placement = strategy->data_parallel_placement();
    EXPECT_EQ(placement.rank, rank);
    EXPECT_EQ(placement.size, 2);
    train(*strategy, kStepsBefore + 1, rank, 2);
    reconfigured[static_cast<std::size_t>(rank)] = full_parameters(*strategy, kind, total);
  });

  // The reference: a fresh world of 2 loads the checkpoint and takes the same step.
  std::vector<std::vector<float>> loaded(2);
  const auto ref_store = make_memory_store();
  run_threads(2, [&](int rank) {
    auto world = transport->connect(ref_store, rank, 2, kTestTimeout);
    auto strategy = make(kind);
    strategy->setup({world, model, testing::zero_test_adam(), 11});
    strategy->load(FileCheckpointReader(written));
    train(*strategy, kStepsBefore + 1, rank, 2);
    loaded[static_cast<std::size_t>(rank)] = full_parameters(*strategy, kind, total);
  });

  for (std::size_t r = 0; r < 2; ++r) {
    ASSERT_EQ(reconfigured[r].size(), total);
    ASSERT_EQ(loaded[r].size(), total);
    EXPECT_EQ(0, std::memcmp(reconfigured[r].data(), loaded[r].data(), total * sizeof(float)))
        << name_of(kind) << ": rank " << r << " after the world change differs from the loaded run";
  }
}

INSTANTIATE_TEST_SUITE_P(EveryDataParallelStrategy, Reconfigure,
                         ::testing::Values(Kind::ddp, Kind::zero1, Kind::zero2, Kind::zero3),
                         [](const auto& param) { return name_of(param.param); });

// Every rank's save() into one place (blobs by name, slices by blob name), for comparison with
// what the exchange hands each rank.
using SliceMap = std::map<std::string, std::vector<float>>;

class CollectedState final : public CheckpointWriter {
 public:
  void put(const std::string& name, std::span<const std::byte> bytes) override {
    const std::lock_guard lock(mutex_);
    blobs_[name].assign(bytes.begin(), bytes.end());
  }
  void put_slice(const StateSlice& slice, std::span<const float> values) override {
    const std::lock_guard lock(mutex_);
    slices_[slice_blob_name(slice)].assign(values.begin(), values.end());
  }
  std::map<std::string, std::vector<std::byte>> blobs() const {
    const std::lock_guard lock(mutex_);
    return blobs_;
  }
  SliceMap slices() const {
    const std::lock_guard lock(mutex_);
    return slices_;
  }

 private:
  mutable std::mutex mutex_;
  std::map<std::string, std::vector<std::byte>> blobs_;
  SliceMap slices_;
};

SliceMap slices_of(const MemoryCheckpoint& state) {
  SliceMap out;
  const auto described = state.slices();
  for (std::size_t i = 0; i < described.size(); ++i) {
    out[slice_blob_name(described[i])] = state.slice_values(i);
  }
  return out;
}

TEST(MemoryState, EveryRankReceivesEveryRanksBlobsAndSlices) {
  const auto model = testing::zero_test_mlp();
  CollectedState saved;
  std::vector<std::map<std::string, std::vector<std::byte>>> received(3);
  std::vector<SliceMap> received_slices(3);
  testing::run_ranks(3, [&](std::shared_ptr<Communicator> world) {
    zero::ZeroConfig config;
    config.first_bucket_bytes = 16384;
    config.bucket_cap_bytes = 32768;
    zero::ZeroStrategy strategy(config);
    strategy.setup({world, model, testing::zero_test_adam(), 11});
    train(strategy, 1, world->rank(), 3);  // optimizer state other than zeros
    strategy.save(saved);
    const auto state = gather_state_in_memory(strategy, *world);
    const auto r = static_cast<std::size_t>(world->rank());
    received[r] = state->blobs();
    received_slices[r] = slices_of(*state);
  });
  const auto all = saved.blobs();
  const auto all_slices = saved.slices();
  EXPECT_GT(all.size() + all_slices.size(), 6U);  // each rank's pieces and rank 0's manifest
  EXPECT_FALSE(all_slices.empty());               // zero saves per-parameter slices
  for (std::size_t r = 0; r < received.size(); ++r) {
    EXPECT_EQ(received[r], all) << "rank " << r;
    EXPECT_EQ(received_slices[r], all_slices) << "rank " << r;
  }
}

TEST(MemoryState, ABlobNameWrittenTwiceOrMissingIsACheckpointError) {
  MemoryCheckpoint state(1);
  const std::byte one[1] = {std::byte{1}};
  state.put("a", one);
  EXPECT_THROW(state.put("a", one), CheckpointError);
  EXPECT_THROW((void)state.get("b"), CheckpointError);
  EXPECT_EQ(state.get("a"), std::vector<std::byte>{std::byte{1}});
}

}  // namespace
}  // namespace tessera
