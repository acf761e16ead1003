// Every strategy loads every other's checkpoint at every world size. Writers: ddp, zero1, zero2
// and zero3 at 1 to 4 ranks, after two Adam steps; each checkpoint is loaded by each of them at
// 1 to 4 ranks. The loaded parameters are the writer's bit for bit, and one more step from them
// gives ddp's parameters at that world size bit for bit, which holds only if the optimizer state
// was resharded correctly too. The MLP's first weight has rows of 60 elements, so zero's 4096-
// element pieces and zero3's per-rank ranges cut rows in the middle. Checkpoints of format 1
// (tests/unit/data/checkpoint_v1) load the same way. The gpt model too (CheckpointReshardGpt):
// typed token inputs, per-token targets, blocks of 12 parameters each, 9,450 parameters that
// zero's 4-byte buckets cut into pieces ending inside a block and a norm.
#include <gtest/gtest.h>

#include <filesystem>
#include <memory>
#include <string>

#include "adam/adam.hpp"
#include "checkpoint_test_support.hpp"
#include "ddp_strategy.hpp"
#include "ddp_test_support.hpp"
#include "gpt/gpt_model.hpp"
#include "mlp/mlp_model.hpp"
#include "synthetic/synthetic.hpp"
#include "tessera/base/random.hpp"
#include "tessera/strategy_kit/param_checkpoint.hpp"
#include "zero3_strategy.hpp"
#include "zero_strategy.hpp"

namespace tessera {
namespace {

const std::vector<std::string> kStrategies = {"ddp", "zero1", "zero2", "zero3"};

std::shared_ptr<Strategy> make_strategy(const std::string& name) {
  if (name == "ddp") return std::make_shared<ddp::DdpStrategy>(ddp::DdpConfig{});
  if (name == "zero3") return std::make_shared<zero3::Zero3Strategy>(zero3::Zero3Config{});
  zero::ZeroConfig config;
  config.stage = name == "zero1" ? zero::ZeroStage::one : zero::ZeroStage::two;
  config.first_bucket_bytes = 4;  // as many buckets, hence pieces, as the model allows
  config.bucket_cap_bytes = 4;
  return std::make_shared<zero::ZeroStrategy>(config);
}

// Collective: every parameter, in FlatLayout order.
std::vector<float> parameters_of(Strategy& strategy, std::size_t total) {
  if (auto* ddp = dynamic_cast<ddp::DdpStrategy*>(&strategy)) {
    return {ddp->parameters().begin(), ddp->parameters().end()};
  }
  if (auto* zero = dynamic_cast<zero::ZeroStrategy*>(&strategy)) {
    const auto p = zero->parameters().first(total);
    return {p.begin(), p.end()};
  }
  return dynamic_cast<zero3::Zero3Strategy&>(strategy).gather_parameters();
}

std::shared_ptr<const Model> mlp_of(std::vector<std::size_t> sizes) {
  mlp::MlpConfig config;
  config.sizes = std::move(sizes);
  return std::make_shared<mlp::MlpModel>(config);
}

std::shared_ptr<const Dataset> data_of(std::size_t features, std::size_t classes) {
  synthetic::SyntheticConfig config;
  config.samples = 512;
  config.test_samples = 16;
  config.features = features;
  config.classes = classes;
  return std::make_shared<synthetic::SyntheticDataset>(config);
}

// Windows of `context` random tokens of `vocab` (counter-based, so every rank sees the same),
// the targets the next tokens: enough for resharding, which needs no structure to learn.
class RandomTokens final : public Dataset {
 public:
  RandomTokens(std::size_t context, std::size_t vocab) : context_(context), vocab_(vocab) {}
  [[nodiscard]] std::size_t size(Split split) const noexcept override {
    return split == Split::train ? 97 : 13;
  }
  [[nodiscard]] SampleLayout layout() const override {
    return {DType::i64, {context_}, {context_}, vocab_};
  }
  [[nodiscard]] Batch gather(Split split, std::span<const std::size_t> indices) const override {
    Batch batch{Tensor({indices.size(), context_}, DType::i64),
                Tensor({indices.size(), context_}, DType::i64)};
    const std::uint64_t stream = split == Split::train ? 0 : 1;
    const auto token = [&](std::size_t sample, std::size_t t) {
      return static_cast<std::int64_t>(counter_random(5, stream, sample * (context_ + 1) + t) %
                                       vocab_);
    };
    for (std::size_t r = 0; r < indices.size(); ++r) {
      for (std::size_t t = 0; t < context_; ++t) {
        batch.inputs.as<std::int64_t>()[r * context_ + t] = token(indices[r], t);
        batch.targets.as<std::int64_t>()[r * context_ + t] = token(indices[r], t + 1);
      }
    }
    return batch;
  }

 private:
  std::size_t context_, vocab_;
};

// Steps [first, first + steps) with 8 samples per rank.
void train(Strategy& strategy, const Dataset& data, const Communicator& world, int first,
           int steps) {
  const auto global = 8 * static_cast<std::size_t>(world.size());
  for (int s = first; s < first + steps; ++s) {
    std::vector<std::size_t> rows(8);
    for (std::size_t i = 0; i < 8; ++i)
      rows[i] =
          (static_cast<std::size_t>(s) * global + static_cast<std::size_t>(world.rank()) * 8 + i) %
          data.size(Split::train);
    strategy.train_step(data.gather(Split::train, rows), StepInfo{s + 1, 1e-2F, global});
  }
}

struct Loaded {
  std::vector<float> params;  // right after load
  std::vector<float> after;   // after one more step
};

// Loads `checkpoint` into `strategy` at `ranks`, then steps once more from step `step`.
Loaded load_and_step(const std::string& strategy, int ranks, const CheckpointReader& checkpoint,
                     const std::shared_ptr<const Model>& model,
                     const std::shared_ptr<const Dataset>& data, int step) {
  Loaded out;
  const std::size_t total = FlatLayout::of(*model).total;
  testing::run_ranks(ranks, [&](std::shared_ptr<Communicator> world) {
    auto s = make_strategy(strategy);
    s->setup({world, model, std::make_shared<adam::AdamOptimizer>(adam::AdamConfig{}), 99, 0.0, 1});
    s->load(checkpoint);
    auto params = parameters_of(*s, total);
    train(*s, *data, *world, step, 1);
    auto after = parameters_of(*s, total);
    if (world->rank() == 0) out = {std::move(params), std::move(after)};
  });
  return out;
}

// Every loader at every world size against the writer's parameters and ddp's next step.
void expect_every_strategy_loads(const CheckpointReader& checkpoint,
                                 const std::vector<float>& written,
                                 const std::shared_ptr<const Model>& model,
                                 const std::shared_ptr<const Dataset>& data, int step,
                                 const std::string& what) {
  for (int ranks = 1; ranks <= 4; ++ranks) {
    const auto reference = load_and_step("ddp", ranks, checkpoint, model, data, step);
    ASSERT_EQ(reference.after.size(), written.size()) << what;
    EXPECT_TRUE(reference.params == written) << what << " loaded by ddp at " << ranks;
    for (const auto& loader : kStrategies) {
      if (loader == "ddp") continue;
      const auto loaded = load_and_step(loader, ranks, checkpoint, model, data, step);
      EXPECT_TRUE(loaded.params == written) << what << " loaded by " << loader << " at " << ranks;
      EXPECT_TRUE(loaded.after == reference.after)
          << what << " loaded by " << loader << " at " << ranks << ": the next step differs";
    }
  }
}

// `writer` at `ranks` trains two steps and saves; every strategy loads that at every world size.
void write_then_load_everywhere(const std::string& writer, int ranks,
                                const std::shared_ptr<const Model>& model,
                                const std::shared_ptr<const Dataset>& data) {
  testing::MemoryCheckpoint checkpoint(ranks);
  std::vector<float> written;
  const std::size_t total = FlatLayout::of(*model).total;
  testing::run_ranks(ranks, [&](std::shared_ptr<Communicator> world) {
    auto s = make_strategy(writer);
    s->setup({world, model, std::make_shared<adam::AdamOptimizer>(adam::AdamConfig{}), 3, 0.0, 1});
    train(*s, *data, *world, 0, 2);
    s->save(checkpoint);
    auto params = parameters_of(*s, total);
    if (world->rank() == 0) written = std::move(params);
  });
  ASSERT_EQ(written.size(), total);
  const SliceReader reader(checkpoint);
  EXPECT_EQ(reader.index().strategy, writer);
  reader.verify();
  expect_every_strategy_loads(checkpoint, written, model, data, 2,
                              writer + " at " + std::to_string(ranks));
}

class CheckpointReshard : public ::testing::TestWithParam<std::tuple<std::string, int>> {};

TEST_P(CheckpointReshard, EveryStrategyLoadsItAtEveryWorldSizeBitwise) {
  write_then_load_everywhere(std::get<0>(GetParam()), std::get<1>(GetParam()), mlp_of({60, 96, 10}),
                             data_of(60, 10));
}

std::string writer_and_world(const ::testing::TestParamInfo<std::tuple<std::string, int>>& info) {
  return std::get<0>(info.param) + "_at_" + std::to_string(std::get<1>(info.param));
}

INSTANTIATE_TEST_SUITE_P(WritersAndWorlds, CheckpointReshard,
                         ::testing::Combine(::testing::ValuesIn(kStrategies),
                                            ::testing::Values(1, 2, 3, 4)),
                         writer_and_world);

// The gpt model: 2 blocks, 3 heads of 6 channels, context 7, 29 tokens (9,450 parameters).
class CheckpointReshardGpt : public ::testing::TestWithParam<std::tuple<std::string, int>> {};

TEST_P(CheckpointReshardGpt, EveryStrategyLoadsItAtEveryWorldSizeBitwise) {
  write_then_load_everywhere(std::get<0>(GetParam()), std::get<1>(GetParam()),
                             std::make_shared<gpt::GptModel>(gpt::GptConfig{{2, 3, 18, 7, 29}, 1}),
                             std::make_shared<RandomTokens>(7, 29));
}

INSTANTIATE_TEST_SUITE_P(WritersAndWorlds, CheckpointReshardGpt,
                         ::testing::Combine(::testing::ValuesIn(kStrategies),
                                            ::testing::Values(2, 3)),
                         writer_and_world);

// Round one's checkpoints (tests/unit/data/checkpoint_v1/written_by.ini: an MLP 6-5-3, Adam,
// two steps of 8 samples per rank) as users have them on disk.
TEST(CheckpointReshardFormatOne, EveryStrategyLoadsRoundOnesCheckpointsAtEveryWorldSize) {
  const auto model = mlp_of({6, 5, 3});
  const auto data = data_of(6, 3);
  for (const std::string run : {"ddp-n1", "zero2-n2", "zero3-n3"}) {
    const FileCheckpointReader checkpoint(std::filesystem::path(TESSERA_TEST_DATA_DIR) /
                                          "checkpoint_v1" / run / "step-000000000002");
    // What round one wrote, read straight from its flat blobs at the writer's world size 1;
    // the sharded ones are checked against it through ddp.
    std::vector<float> written(53);
    if (run == "ddp-n1") {
      const auto bytes = checkpoint.get("flat/params/0");
      ASSERT_EQ(bytes.size(), 53 * sizeof(float));
      std::memcpy(written.data(), bytes.data(), bytes.size());
    } else {
      written = load_and_step("ddp", 1, checkpoint, model, data, 2).params;
    }
    expect_every_strategy_loads(checkpoint, written, model, data, 2, "format 1 " + run);
  }
}

}  // namespace
}  // namespace tessera
