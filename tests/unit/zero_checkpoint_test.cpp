// Sharded zero checkpoints: written at one world size, loaded at another, refused when the
// manifest does not match its shards.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <functional>

#include "ddp_strategy.hpp"
#include "ddp_test_support.hpp"
#include "tessera/runtime/checkpoint.hpp"
#include "tessera/strategy_kit/param_checkpoint.hpp"
#include "zero_strategy.hpp"
#include "zero_test_support.hpp"

namespace tessera {
namespace {

using testing::replaced;
using testing::run_ranks;

struct Consolidated {
  std::vector<float> params;
  std::vector<float> state;
};

zero::ZeroConfig small_buckets(zero::ZeroStage stage) {
  zero::ZeroConfig config;
  config.stage = stage;
  config.first_bucket_bytes = 4;
  config.bucket_cap_bytes = 4;
  return config;
}

void train_steps(Strategy& strategy, const Communicator& world, int steps) {
  const auto data = testing::zero_test_data();
  const auto rank = static_cast<std::size_t>(world.rank());
  const auto global = 8 * static_cast<std::size_t>(world.size());
  for (int s = 0; s < steps; ++s) {
    strategy.train_step(data->gather(Split::train, testing::consecutive(s * global + rank * 8, 8)),
                        StepInfo{s + 1, 1e-3F, global});
  }
}

Consolidated consolidate(zero::ZeroStrategy& strategy) {
  Consolidated out;
  const auto p = strategy.parameters().first(strategy.flat_layout().total);
  out.params.assign(p.begin(), p.end());
  out.state = strategy.consolidated_optimizer_state();
  return out;
}

class ZeroCheckpoint : public ::testing::Test {
 protected:
  void SetUp() override {
    root_ = std::filesystem::temp_directory_path() /
            ("tessera_zero_ckpt_" + std::to_string(::getpid()) + "_" +
             ::testing::UnitTest::GetInstance()->current_test_info()->name());
    std::filesystem::remove_all(root_);
  }
  void TearDown() override { std::filesystem::remove_all(root_); }

  // Trains zero2 at `ranks` for a few steps, writes a checkpoint, returns the consolidated
  // state it wrote.
  Consolidated save_at(int ranks) {
    Consolidated saved;
    run_ranks(ranks, [&](std::shared_ptr<Communicator> world) {
      zero::ZeroStrategy strategy(small_buckets(zero::ZeroStage::two));
      strategy.setup({world, testing::zero_test_mlp(), testing::zero_test_adam(), 3, 0.0, 1});
      train_steps(strategy, *world, 5);
      write_checkpoint(
          root_, 5, {}, *world, [&](CheckpointWriter& w) { strategy.save(w); }, {},
          testing::kTestTimeout);
      auto c = consolidate(strategy);
      if (world->rank() == 0) saved = std::move(c);
    });
    return saved;
  }

  Consolidated load_at(int ranks, zero::ZeroStage stage) {
    Consolidated loaded;
    const FileCheckpointReader reader(*latest_checkpoint(root_));
    run_ranks(ranks, [&](std::shared_ptr<Communicator> world) {
      zero::ZeroStrategy strategy(small_buckets(stage));
      strategy.setup({world, testing::zero_test_mlp(), testing::zero_test_adam(), 99, 0.0, 1});
      strategy.load(reader);
      auto c = consolidate(strategy);
      if (world->rank() == 0) loaded = std::move(c);
    });
    return loaded;
  }

  std::filesystem::path root_;
};

TEST_F(ZeroCheckpoint, SavedAtFourRanksLoadsAtTwoAndThreeWithIdenticalState) {
  const auto saved = save_at(4);
  ASSERT_FALSE(saved.state.empty());
  for (int ranks : {2, 3}) {
    const auto loaded = load_at(ranks, zero::ZeroStage::two);
    EXPECT_EQ(0, std::memcmp(saved.params.data(), loaded.params.data(),
                             saved.params.size() * sizeof(float)))
        << ranks << " ranks";
    ASSERT_EQ(saved.state.size(), loaded.state.size());
    EXPECT_EQ(
        0, std::memcmp(saved.state.data(), loaded.state.data(), saved.state.size() * sizeof(float)))
        << ranks << " ranks";
  }
  const auto zero1 = load_at(3, zero::ZeroStage::one);
  EXPECT_EQ(saved.state, zero1.state);
}

TEST_F(ZeroCheckpoint, DdpLoadsAZeroTwoCheckpoint) {
  const auto saved = save_at(3);
  const FileCheckpointReader reader(*latest_checkpoint(root_));
  run_ranks(1, [&](std::shared_ptr<Communicator> world) {
    ddp::DdpStrategy strategy(ddp::DdpConfig{});
    strategy.setup({world, testing::zero_test_mlp(), testing::zero_test_adam(), 99, 0.0, 1});
    strategy.load(reader);
    const auto p = strategy.parameters();
    EXPECT_EQ(saved.params, std::vector<float>(p.begin(), p.end()));
  });
}

// Loads `checkpoint` into zero2 at two ranks of `model`; it must fail with a CheckpointError
// whose message contains `expected`.
void expect_load_refused(const CheckpointReader& checkpoint, std::shared_ptr<const Model> model,
                         const std::string& expected) {
  run_ranks(2, [&](std::shared_ptr<Communicator> world) {
    zero::ZeroStrategy strategy(small_buckets(zero::ZeroStage::two));
    strategy.setup({world, model, testing::zero_test_adam(), 3, 0.0, 1});
    try {
      strategy.load(checkpoint);
      ADD_FAILURE() << "a tampered checkpoint was loaded";
    } catch (const CheckpointError& e) {
      EXPECT_NE(std::string(e.what()).find(expected), std::string::npos) << e.what();
    }
  });
}

// Saves zero2 at three ranks into memory and hands the blobs to `tamper`; loading must then
// fail with a CheckpointError whose message contains `expected`.
void expect_refused(const std::function<void(testing::MemoryCheckpoint&)>& tamper,
                    const std::string& expected) {
  testing::MemoryCheckpoint checkpoint(3);
  run_ranks(3, [&](std::shared_ptr<Communicator> world) {
    zero::ZeroStrategy strategy(small_buckets(zero::ZeroStage::two));
    strategy.setup({world, testing::zero_test_mlp(), testing::zero_test_adam(), 3, 0.0, 1});
    strategy.save(checkpoint);
  });
  ASSERT_NO_THROW(SliceReader(checkpoint).verify());
  tamper(checkpoint);
  expect_load_refused(checkpoint, testing::zero_test_mlp(), expected);
}

using SliceList = std::vector<std::pair<StateSlice, std::vector<float>>>;

// The first slice of `list` for which `want` holds.
SliceList::iterator find_slice(SliceList& list,
                               const std::function<bool(const StateSlice&)>& want) {
  const auto it =
      std::find_if(list.begin(), list.end(), [&](const auto& entry) { return want(entry.first); });
  EXPECT_NE(it, list.end());
  return it;
}

bool inner_piece_of_state(const StateSlice& s) {
  return s.param == "fc1.weight" && s.kind == StateKind::optimizer_state && s.slot == 1 &&
         s.first > 0;
}

TEST(ZeroCheckpointSlices, AMissingSliceIsRefusedBeforeAnythingIsLoaded) {
  expect_refused(
      [](testing::MemoryCheckpoint& c) {
        auto& list = c.slice_list();
        list.erase(find_slice(list, inner_piece_of_state));
      },
      "of 2.fc1.weight [128x128] optimizer state slot 1: a rank's blobs are missing");
}

TEST(ZeroCheckpointSlices, OverlappingSlicesAreRefused) {
  expect_refused(
      [](testing::MemoryCheckpoint& c) {
        auto& list = c.slice_list();
        auto copy = *find_slice(list, inner_piece_of_state);
        copy.first.first -= 1;
        copy.second.insert(copy.second.begin(), 0.0F);
        list.push_back(copy);
      },
      "the checkpoint's slices overlap");
}

TEST(ZeroCheckpointSlices, ASliceWithFewerValuesThanItsDescriptionIsRefused) {
  expect_refused(
      [](testing::MemoryCheckpoint& c) {
        auto& list = c.slice_list();
        find_slice(list, [](const StateSlice& s) {
          return s.kind == StateKind::parameter;
        })->second.pop_back();
      },
      "values, its slice");
}

TEST(ZeroCheckpointSlices, AnIndexWithFewerOptimizerSlotsThanItsSlicesIsRefused) {
  expect_refused(
      [](testing::MemoryCheckpoint& c) {
        c.set_text("parameters", replaced(c.text("parameters"), "\"state_per_param\": 2",
                                          "\"state_per_param\": 1"));
      },
      "holds optimizer state slot 1, but the optimizer had 1");
}

TEST(ZeroCheckpointSlices, ACheckpointOfAnotherModelIsRefusedNamingTheParameter) {
  testing::MemoryCheckpoint checkpoint(3);
  run_ranks(3, [&](std::shared_ptr<Communicator> world) {
    zero::ZeroStrategy strategy(small_buckets(zero::ZeroStage::two));
    strategy.setup({world, testing::zero_test_mlp(), testing::zero_test_adam(), 3, 0.0, 1});
    strategy.save(checkpoint);
  });
  mlp::MlpConfig narrower;
  narrower.sizes = {64, 128, 64, 10};
  expect_load_refused(checkpoint, std::make_shared<mlp::MlpModel>(narrower),
                      "another model: its parameter 2 is 2.fc1.weight [128x128], the model's "
                      "2.fc1.weight [64x128]");
}

// Format 1 (round one): the zero2 checkpoint of tests/unit/data/checkpoint_v1 (an MLP 6-5-3,
// Adam, two ranks) loads, and its sharded manifest and flat layout are still checked.
std::shared_ptr<const Model> format_one_mlp() {
  mlp::MlpConfig config;
  config.sizes = {6, 5, 3};
  return std::make_shared<mlp::MlpModel>(config);
}

std::unique_ptr<testing::MemoryCheckpoint> format_one_zero2() {
  return testing::MemoryCheckpoint::copy_of(FileCheckpointReader(
      std::filesystem::path(TESSERA_TEST_DATA_DIR) / "checkpoint_v1/zero2-n2/step-000000000002"));
}

void expect_format_one_refused(const std::function<void(testing::MemoryCheckpoint&)>& tamper,
                               const std::string& expected) {
  const auto checkpoint = format_one_zero2();
  tamper(*checkpoint);
  expect_load_refused(*checkpoint, format_one_mlp(), expected);
}

TEST(ZeroCheckpointFormatOne, LoadsAtThreeRanksAsDdpReadsIt) {
  const auto checkpoint = format_one_zero2();
  std::vector<float> as_ddp;
  run_ranks(1, [&](std::shared_ptr<Communicator> world) {
    ddp::DdpStrategy strategy(ddp::DdpConfig{});
    strategy.setup({world, format_one_mlp(), testing::zero_test_adam(), 99, 0.0, 1});
    strategy.load(*checkpoint);
    as_ddp.assign(strategy.parameters().begin(), strategy.parameters().end());
  });
  // The checkpoint's own bytes: piece 0 holds every parameter (53 elements, then padding).
  const auto bytes = checkpoint->get("flat/params/0");
  std::vector<float> raw(53);
  std::memcpy(raw.data(), bytes.data(), raw.size() * sizeof(float));
  EXPECT_EQ(as_ddp, raw);
  run_ranks(3, [&](std::shared_ptr<Communicator> world) {
    zero::ZeroStrategy strategy(small_buckets(zero::ZeroStage::one));
    strategy.setup({world, format_one_mlp(), testing::zero_test_adam(), 99, 0.0, 1});
    strategy.load(*checkpoint);
    const auto p = strategy.parameters().first(53);
    EXPECT_EQ(std::vector<float>(p.begin(), p.end()), raw);
  });
}

TEST(ZeroCheckpointFormatOne, PieceRangeThatDiffersFromTheShardsIsRefused) {
  expect_format_one_refused(
      [](testing::MemoryCheckpoint& c) {
        c.set_text("sharded/manifest",
                   replaced(c.text("sharded/manifest"), "piece 1 rank 1 4096 8192",
                            "piece 1 rank 1 4096 8000"));
      },
      "piece 1 differs from flat/shards");
}

TEST(ZeroCheckpointFormatOne, ManifestOfAnotherWorldSizeIsRefused) {
  expect_format_one_refused(
      [](testing::MemoryCheckpoint& c) {
        c.set_text("sharded/manifest", replaced(c.text("sharded/manifest"), "world 2", "world 4"));
      },
      "written by 2 ranks");
}

TEST(ZeroCheckpointFormatOne, MissingShardBlobIsRefused) {
  expect_format_one_refused([](testing::MemoryCheckpoint& c) { c.erase("flat/optimizer_state/1"); },
                            "blobs of piece 1 (rank 1) are missing");
}

TEST(ZeroCheckpointFormatOne, ShardsThatLeaveAGapAreRefused) {
  expect_format_one_refused(
      [](testing::MemoryCheckpoint& c) {
        c.set_text("sharded/manifest", replaced(c.text("sharded/manifest"), "piece 0 rank 0 0 4096",
                                                "piece 0 rank 0 8 4096"));
        c.set_text("flat/shards", replaced(c.text("flat/shards"), "0 0 4096", "0 8 4096"));
      },
      "gap or overlap");
}

TEST(ZeroCheckpointFormatOne, ShardBlobOfTheWrongSizeIsRefused) {
  expect_format_one_refused(
      [](testing::MemoryCheckpoint& c) {
        auto bytes = c.get("flat/params/0");
        bytes.resize(bytes.size() - 4);
        c.put("flat/params/0", bytes);
      },
      "flat/params/0");
}

TEST(ZeroCheckpointFormatOne, ALayoutWithAMalformedShapeIsRefused) {
  expect_format_one_refused(
      [](testing::MemoryCheckpoint& c) {
        c.set_text("flat/layout", replaced(c.text("flat/layout"), " 5x6 ", " 5xq "));
      },
      "bad shape '5xq'");
}

TEST(ZeroCheckpointFormatOne, ALayoutWhoseCountDisagreesWithItsShapeIsRefused) {
  expect_format_one_refused(
      [](testing::MemoryCheckpoint& c) {
        c.set_text("flat/layout", replaced(c.text("flat/layout"), "0 0 30 5x6", "0 0 31 5x6"));
      },
      "another count");
}

TEST(ZeroCheckpointFormatOne, ALayoutWithAGapBetweenParametersIsRefused) {
  expect_format_one_refused(
      [](testing::MemoryCheckpoint& c) {
        c.set_text("flat/layout", replaced(c.text("flat/layout"), "0 30 5 5", "0 31 5 5"));
      },
      "gap or overlap before a parameter");
}

}  // namespace
}  // namespace tessera
