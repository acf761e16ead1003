// Sharded zero checkpoints: written at one world size, loaded at another, refused when the
// manifest does not match its shards.
#include <gtest/gtest.h>

#include <cstring>
#include <filesystem>
#include <functional>
#include <sstream>

#include "ddp_strategy.hpp"
#include "ddp_test_support.hpp"
#include "tessera/runtime/checkpoint.hpp"
#include "tessera/strategy_kit/sharded_checkpoint.hpp"
#include "zero_strategy.hpp"
#include "zero_test_support.hpp"

namespace tessera {
namespace {

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
  ASSERT_TRUE(verify_sharded_checkpoint(checkpoint));
  tamper(checkpoint);
  run_ranks(2, [&](std::shared_ptr<Communicator> world) {
    zero::ZeroStrategy strategy(small_buckets(zero::ZeroStage::two));
    strategy.setup({world, testing::zero_test_mlp(), testing::zero_test_adam(), 3, 0.0, 1});
    try {
      strategy.load(checkpoint);
      ADD_FAILURE() << "a tampered checkpoint was loaded";
    } catch (const CheckpointError& e) {
      EXPECT_NE(std::string(e.what()).find(expected), std::string::npos) << e.what();
    }
  });
}

TEST(ZeroCheckpointManifest, PieceRangeThatDiffersFromTheShardsIsRefused) {
  expect_refused(
      [](testing::MemoryCheckpoint& c) {
        auto m = ShardedManifest::parse(c.text("sharded/manifest"));
        m.pieces[1].range.end -= 4096;
        c.set_text("sharded/manifest", m.serialize());
      },
      "piece 1 differs from flat/shards");
}

TEST(ZeroCheckpointManifest, ManifestOfAnotherWorldSizeIsRefused) {
  expect_refused(
      [](testing::MemoryCheckpoint& c) {
        auto m = ShardedManifest::parse(c.text("sharded/manifest"));
        m.world_size = 4;
        c.set_text("sharded/manifest", m.serialize());
      },
      "written by 3 ranks");
}

TEST(ZeroCheckpointManifest, MissingShardBlobIsRefused) {
  expect_refused([](testing::MemoryCheckpoint& c) { c.erase("flat/optimizer_state/2"); },
                 "blobs of piece 2 (rank 2) are missing");
}

TEST(ZeroCheckpointManifest, ShardsThatLeaveAGapAreRefused) {
  expect_refused(
      [](testing::MemoryCheckpoint& c) {
        auto m = ShardedManifest::parse(c.text("sharded/manifest"));
        m.pieces[0].range.begin += 4096;
        c.set_text("sharded/manifest", m.serialize());
        std::string shards = "shards " + std::to_string(m.pieces.size()) + " state_per_param 2\n";
        for (std::size_t k = 0; k < m.pieces.size(); ++k) {
          shards += std::to_string(k) + " " + std::to_string(m.pieces[k].range.begin) + " " +
                    std::to_string(m.pieces[k].range.end) + "\n";
        }
        c.set_text("flat/shards", shards);
      },
      "gap or overlap");
}

TEST(ZeroCheckpointManifest, ShardBlobOfTheWrongSizeIsRefused) {
  expect_refused(
      [](testing::MemoryCheckpoint& c) {
        // Piece 3 (bucket 1, rank 0) holds parameters, not only padding.
        auto bytes = c.get("flat/params/3");
        bytes.resize(bytes.size() - 4);
        c.put("flat/params/3", bytes);
      },
      "flat/params/3");
}

// flat/layout with field `field` (0: "param", 1: layer, 2: offset, 3: count, 4: shape) of the
// first parameter line replaced by `value`.
void edit_first_layout_param(testing::MemoryCheckpoint& c, std::size_t field,
                             const std::string& value) {
  const std::string text = c.text("flat/layout");
  const auto begin = text.find('\n') + 1;
  const auto end = text.find('\n', begin);
  std::istringstream in(text.substr(begin, end - begin));
  std::vector<std::string> fields(5);
  for (auto& f : fields) in >> f;
  std::string name;
  std::getline(in, name);
  fields.at(field) = value;
  std::string line;
  for (const auto& f : fields) line += f + " ";
  line.pop_back();
  c.set_text("flat/layout", text.substr(0, begin) + line + name + text.substr(end));
}

TEST(ZeroCheckpointManifest, ALayoutWithAMalformedShapeIsRefused) {
  // Before: std::invalid_argument from std::stoul, not a CheckpointError.
  expect_refused([](testing::MemoryCheckpoint& c) { edit_first_layout_param(c, 4, "16xq"); },
                 "bad shape '16xq'");
}

TEST(ZeroCheckpointManifest, ALayoutWhoseCountDisagreesWithItsShapeIsRefused) {
  expect_refused([](testing::MemoryCheckpoint& c) { edit_first_layout_param(c, 3, "5"); },
                 "another count");
}

TEST(ZeroCheckpointManifest, ALayoutWithAGapBetweenParametersIsRefused) {
  expect_refused([](testing::MemoryCheckpoint& c) { edit_first_layout_param(c, 2, "4"); },
                 "gap or overlap before a parameter");
}

}  // namespace
}  // namespace tessera
