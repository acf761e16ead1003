// The gpt model through the trainer under every data-parallel strategy, on token windows of a
// small generated text (typed i64 inputs, [n, T] next-token targets, a per-token loss):
// - ddp, zero1, zero2 and zero3 give the same losses and test results bit for bit;
// - hybrid with two pipeline stages (cut between blocks) follows one rank of ddp, and their
//   checkpoints and ddp's resume under each other on the same curve;
// - 3 ranks with per-rank batch B give 1 rank with batch 3B to float tolerance (the loss and the
//   gradient are means per token over the global batch);
// - the model learns (the test loss falls well below a uniform guess);
// - a data set whose windows the model does not take is refused naming both layouts;
// - the head tied to wte is one parameter under every strategy: the same bits everywhere, one
//   copy per pipeline stage that uses it, bitwise equal across the stages, one checkpoint
//   entry that resumes bitwise, counted once; a tie between shapes that differ is refused;
// - dropout (at every site, the attention probabilities too) draws each element's mask from the
//   step and its place in the global batch: ddp and every zero stage stay bitwise equal, other
//   world sizes, micro-batches and pipeline stages follow one rank, and a resumed run draws the
//   masks of the run it continues.
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "adam/adam.hpp"
#include "ddp_strategy.hpp"
#include "ddp_test_support.hpp"
#include "generated_text.hpp"
#include "gpt/gpt_model.hpp"
#include "hybrid_strategy.hpp"
#include "tessera/base/error.hpp"
#include "tessera/base/random.hpp"
#include "tessera/runtime/checkpoint.hpp"
#include "tessera/runtime/trainer.hpp"
#include "tessera/strategy_kit/init.hpp"
#include "tessera/strategy_kit/param_checkpoint.hpp"
#include "zero3_strategy.hpp"
#include "zero_strategy.hpp"

namespace tessera {
namespace {

using testing::GeneratedText;
using testing::kVocab;

std::shared_ptr<Strategy> make_strategy(const std::string& name) {
  // Two stages; over 4 ranks, two data-parallel replicas of them. "_recompute": each stage runs
  // a micro-batch's forward again before its backward.
  if (name.starts_with("hybrid_pp2")) {
    hybrid::HybridConfig config;
    config.pipeline_parallel = 2;
    config.recompute = name.ends_with("_recompute");
    return std::make_shared<hybrid::HybridStrategy>(config);
  }
  if (name == "ddp") return std::make_shared<ddp::DdpStrategy>(ddp::DdpConfig{});
  if (name == "zero3") return std::make_shared<zero3::Zero3Strategy>(zero3::Zero3Config{});
  zero::ZeroConfig config;
  config.stage = name == "zero1" ? zero::ZeroStage::one : zero::ZeroStage::two;
  return std::make_shared<zero::ZeroStrategy>(config);
}

// Not nice on purpose: 3 heads of 6 channels, context 7, 29 tokens; 2 blocks = 8,928
// parameters with the head tied to wte (9,450 untied), past one 4096-element norm block, so
// every zero shard at 2 and 3 ranks holds real parameters and zero3 gathers block by block.
std::shared_ptr<const Model> tiny_gpt(float dropout = 0.0F) {
  return std::make_shared<gpt::GptModel>(gpt::GptConfig{{2, 3, 18, 7, kVocab, true, dropout}, 1});
}

TrainerOptions options(std::size_t batch, std::int64_t epochs) {
  TrainerOptions o;
  o.epochs = epochs;
  o.batch_size = batch;
  o.schedule.base_lr = 0.01F;
  o.seed = 11;
  o.progress = ProgressMode::off;
  return o;
}

// After training, on each rank: the strategy (to look at what it holds) and the rank.
using Inspect = std::function<void(Strategy& strategy, int rank)>;

// What a run may change from the default: the optimizer (Adam), a look at each rank's strategy
// after training, a resume from the newest checkpoint in the options' checkpoint_dir.
struct RunExtras {
  std::shared_ptr<const Optimizer> optimizer = nullptr;
  Inspect inspect = nullptr;
  bool resume = false;
  float dropout = 0.0F;  // the model's
};

TrainResult train(const std::string& strategy, int ranks, const TrainerOptions& o,
                  std::shared_ptr<const Dataset> data, RunExtras extras = {}) {
  TrainResult result;
  const auto model = tiny_gpt(extras.dropout);
  const auto optimizer = extras.optimizer
                             ? extras.optimizer
                             : std::make_shared<adam::AdamOptimizer>(adam::AdamConfig{});
  testing::run_ranks(ranks, [&](std::shared_ptr<Communicator> world) {
    const auto trained = make_strategy(strategy);
    TrainerComponents parts{world, model,   optimizer,
                            data,  trained, strategy.starts_with("hybrid") ? "hybrid" : strategy};
    Trainer trainer(o, parts);
    auto r = trainer.run(extras.resume);
    if (extras.inspect) extras.inspect(*trained, world->rank());
    if (world->rank() == 0) result = std::move(r);
  });
  return result;
}

// 101 training windows: the last global batch of 2 x 8 is uneven.
std::shared_ptr<const Dataset> text() {
  return std::make_shared<GeneratedText>(7, 101, 23);
}

TEST(GptStrategies, DdpAndEveryZeroStageGiveTheSameLossesBitwise) {
  const auto data = text();
  const auto ddp = train("ddp", 2, options(8, 1), data);
  ASSERT_EQ(ddp.steps, 7);  // ceil(101 / 16)
  for (const std::string name : {"zero1", "zero2", "zero3"}) {
    const auto other = train(name, 2, options(8, 1), data);
    EXPECT_EQ(other.losses, ddp.losses) << name;
    EXPECT_EQ(other.test_loss, ddp.test_loss) << name;
    EXPECT_EQ(other.test_accuracy, ddp.test_accuracy) << name;
  }
}

// AdamW decays the matrices and leaves biases, norms and embeddings alone (ParamSpec::
// weight_decay). At 3 ranks the zero1/2 pieces and zero3's owned ranges start and end inside
// parameters of both kinds; every strategy still takes the bits of ddp's update.
TEST(GptStrategies, DdpAndEveryZeroStageGiveTheSameLossesBitwiseWithMixedWeightDecay) {
  const auto data = text();
  adam::AdamConfig config;
  config.decoupled_weight_decay = true;
  config.weight_decay = 0.3F;
  const auto adamw = std::make_shared<adam::AdamOptimizer>(config);
  const auto ddp = train("ddp", 3, options(5, 1), data, {.optimizer = adamw});
  ASSERT_EQ(ddp.steps, 7);  // ceil(101 / 15)
  for (const std::string name : {"zero1", "zero2", "zero3"}) {
    const auto other = train(name, 3, options(5, 1), data, {.optimizer = adamw});
    EXPECT_EQ(other.losses, ddp.losses) << name;
    EXPECT_EQ(other.test_loss, ddp.test_loss) << name;
  }
}

TEST(GptStrategies, ThreeRanksOfBatchBMatchOneRankOfBatchThreeBPerToken) {
  const auto data = text();
  const auto three = train("zero2", 3, options(4, 1), data);
  const auto one = train("zero2", 1, options(12, 1), data);
  ASSERT_EQ(three.steps, 9);  // ceil(101 / 12): the last batch has 5 windows
  ASSERT_EQ(one.losses.size(), three.losses.size());
  for (std::size_t s = 0; s < one.losses.size(); ++s) {
    EXPECT_NEAR(three.losses[s], one.losses[s], 1e-4 * one.losses[s]) << "step " << s;
  }
  EXPECT_NEAR(three.test_loss, one.test_loss, 1e-4 * one.test_loss);
}

// Two pipeline stages cut between blocks (the first takes the token ids, the second ends in the
// loss), two micro-batches: the same micro-batches as one rank of ddp. Clipped, so that the
// norm the stages share decides every update.
TEST(GptStrategies, TwoPipelineStagesFollowOneRankOfDdp) {
  const auto data = text();
  auto o = options(16, 1);
  o.micro_batches = 2;
  o.max_grad_norm = 0.5;
  const auto pipeline = train("hybrid_pp2", 2, o, data);
  const auto ddp = train("ddp", 1, o, data);
  ASSERT_EQ(pipeline.losses.size(), ddp.losses.size());
  for (std::size_t s = 0; s < ddp.losses.size(); ++s) {
    EXPECT_NEAR(pipeline.losses[s], ddp.losses[s], 1e-5 * ddp.losses[s]) << "step " << s;
  }
  EXPECT_NEAR(pipeline.test_loss, ddp.test_loss, 1e-5 * ddp.test_loss);
}

// A checkpoint crosses meshes and strategies on the GPT: two pipeline stages train 5 steps, one
// rank of ddp resumes from their checkpoint to step 10, the stages resume from ddp's to the end
// (2 epochs, 14 steps): every step on the uninterrupted curve of one ddp rank.
TEST(GptStrategies, CheckpointsPassBetweenPipelineStagesAndDdpOnTheSameCurve) {
  const auto data = text();
  const auto folder =
      std::filesystem::temp_directory_path() / ("tessera-gpt-mesh-" + std::to_string(::getpid()));
  std::filesystem::remove_all(folder);
  auto o = options(16, 2);
  o.micro_batches = 2;
  const auto whole = train("ddp", 1, o, data);
  ASSERT_EQ(whole.losses.size(), 14U);
  o.checkpoint_dir = folder;
  o.checkpoint_every = 5;
  const auto expect_on_curve = [&](const TrainResult& part, std::size_t first, const char* what) {
    for (std::size_t s = 0; s < part.losses.size(); ++s) {
      EXPECT_NEAR(part.losses[s], whole.losses[first + s], 1e-5 * whole.losses[first + s])
          << what << ", step " << first + s + 1;
    }
  };
  o.max_steps = 5;
  const auto pipeline = train("hybrid_pp2", 2, o, data);
  ASSERT_EQ(pipeline.losses.size(), 5U);
  expect_on_curve(pipeline, 0, "two stages");
  o.max_steps = 10;
  const auto ddp = train("ddp", 1, o, data, {.resume = true});
  EXPECT_EQ(ddp.resumed_from_step, 5);
  ASSERT_EQ(ddp.losses.size(), 5U);
  expect_on_curve(ddp, 5, "ddp from the stages' checkpoint");
  o.max_steps = 0;
  const auto rest = train("hybrid_pp2", 2, o, data, {.resume = true});
  EXPECT_EQ(rest.resumed_from_step, 10);
  ASSERT_EQ(rest.losses.size(), 4U);
  expect_on_curve(rest, 10, "two stages from ddp's checkpoint");
  EXPECT_NEAR(rest.test_loss, whole.test_loss, 1e-5 * whole.test_loss);
  std::filesystem::remove_all(folder);
}

TEST(GptStrategies, TheModelLearnsTheTextsStructure) {
  const auto result = train("ddp", 2, options(8, 6), text());
  // A uniform guess over 29 tokens costs ln 29 = 3.37 nats per token.
  EXPECT_LT(result.test_loss, 0.75 * std::log(static_cast<double>(kVocab)));
  EXPECT_GT(result.test_accuracy, 0.25);  // per token, out of 23 x 7 test targets
  EXPECT_LT(result.losses.back(), result.losses.front());
}

// --- Dropout ----------------------------------------------------------------------------------

// Not a round rate, so that no mask is a coincidence of a simple threshold.
constexpr float kDropout = 0.137F;

// Each step's loss of `part` within `tolerance` (relative) of `whole`'s, and the test loss.
void expect_same_curve(const TrainResult& part, const TrainResult& whole, double tolerance,
                       const std::string& what) {
  ASSERT_EQ(part.losses.size(), whole.losses.size()) << what;
  for (std::size_t s = 0; s < whole.losses.size(); ++s) {
    EXPECT_NEAR(part.losses[s], whole.losses[s], tolerance * whole.losses[s])
        << what << ", step " << s + 1;
  }
  EXPECT_NEAR(part.test_loss, whole.test_loss, tolerance * whole.test_loss) << what;
}

// At 2 and 3 ranks (zero shards cut inside parameters; an uneven last batch, 101 windows) every
// strategy draws each element's mask from its place in the global batch: ddp's bits everywhere.
TEST(GptStrategies, WithDropoutDdpAndEveryZeroStageGiveTheSameLossesBitwise) {
  const auto data = text();
  for (const int ranks : {2, 3}) {
    const auto ddp = train("ddp", ranks, options(5, 1), data, {.dropout = kDropout});
    const auto plain = train("ddp", ranks, options(5, 1), data);
    ASSERT_FALSE(ddp.losses.empty());
    EXPECT_NE(ddp.losses.front(), plain.losses.front()) << "dropout dropped nothing";
    for (const std::string name : {"zero1", "zero2", "zero3"}) {
      const auto other = train(name, ranks, options(5, 1), data, {.dropout = kDropout});
      EXPECT_EQ(other.losses, ddp.losses) << name << " at " << ranks << " ranks";
      EXPECT_EQ(other.test_loss, ddp.test_loss) << name << " at " << ranks << " ranks";
    }
  }
}

// One rank with the whole batch of 6, in one micro-batch, is the reference: one rank in three
// micro-batches, ddp at 2 and 3 ranks and zero3 at 3 ranks in two micro-batches draw the same
// masks for the same windows, so they follow it to float tolerance (the sums run in other
// orders). A rank that drew from its own row 0, or a micro-batch from the rank's, would not.
TEST(GptStrategies, WithDropoutOtherWorldSizesAndMicroBatchesFollowOneRankOfTheWholeBatch) {
  const auto data = text();
  const auto whole = train("ddp", 1, options(6, 1), data, {.dropout = kDropout});
  ASSERT_EQ(whole.steps, 17);  // ceil(101 / 6): the last batch has 5 windows
  struct Run {
    const char* strategy;
    int ranks;
    std::size_t batch, micro_batches;
    const char* what;
  };
  for (const Run& run :
       {Run{"ddp", 1, 6, 3, "one rank, three micro-batches"}, Run{"ddp", 2, 3, 1, "ddp at 2 ranks"},
        Run{"ddp", 3, 2, 1, "ddp at 3 ranks"},
        Run{"zero3", 3, 2, 2, "zero3 at 3 ranks, two micro-batches"}}) {
    auto o = options(run.batch, 1);
    o.micro_batches = run.micro_batches;
    expect_same_curve(train(run.strategy, run.ranks, o, data, {.dropout = kDropout}), whole, 1e-4,
                      run.what);
  }
}

// Two pipeline stages draw each micro-batch's masks from its rows, on both stages and in a
// forward run again for recompute; two replicas of them from their shares of the global batch.
TEST(GptStrategies, WithDropoutPipelineStagesFollowOneRankOfDdp) {
  const auto data = text();
  auto o = options(16, 1);
  o.micro_batches = 2;
  o.max_grad_norm = 0.5;
  const auto ddp = train("ddp", 1, o, data, {.dropout = kDropout});
  expect_same_curve(train("hybrid_pp2", 2, o, data, {.dropout = kDropout}), ddp, 1e-5,
                    "two stages");
  expect_same_curve(train("hybrid_pp2_recompute", 2, o, data, {.dropout = kDropout}), ddp, 1e-5,
                    "two stages that recompute");
  auto replicas = options(8, 1);
  replicas.max_grad_norm = 0.5;
  expect_same_curve(train("hybrid_pp2", 4, replicas, data, {.dropout = kDropout}), ddp, 1e-5,
                    "two replicas of two stages");
}

// The masks are a function of the step, not of how the run got there: resumed at step 4, ddp,
// zero2 and two pipeline stages continue the uninterrupted run's losses bit for bit.
TEST(GptStrategies, WithDropoutARunResumedMidwayDrawsTheMasksOfTheRunItContinues) {
  namespace fs = std::filesystem;
  const auto data = text();
  for (const std::string name : {"ddp", "zero2", "hybrid_pp2"}) {
    const fs::path root = fs::temp_directory_path() /
                          ("tessera-gpt-dropout-" + std::to_string(::getpid()) + "-" + name);
    fs::remove_all(root);
    const auto whole = train(name, 2, options(8, 1), data, {.dropout = kDropout});
    ASSERT_GT(whole.steps, 4);
    auto first = options(8, 1);
    first.checkpoint_dir = root;
    first.checkpoint_every = 4;
    first.max_steps = 4;
    ASSERT_EQ(train(name, 2, first, data, {.dropout = kDropout}).steps, 4);
    auto second = options(8, 1);
    second.checkpoint_dir = root;
    const auto resumed = train(name, 2, second, data, {.resume = true, .dropout = kDropout});
    EXPECT_EQ(resumed.resumed_from_step, 4) << name;
    const std::vector<double> rest(whole.losses.begin() + 4, whole.losses.end());
    EXPECT_EQ(resumed.losses, rest) << name;
    EXPECT_EQ(resumed.test_loss, whole.test_loss) << name;
    fs::remove_all(root);
  }
}

// Records which test windows each evaluation gathered.
class RecordedTestWindows final : public Dataset {
 public:
  explicit RecordedTestWindows(std::shared_ptr<const Dataset> data) : data_(std::move(data)) {}
  [[nodiscard]] std::size_t size(Split split) const noexcept override { return data_->size(split); }
  [[nodiscard]] SampleLayout layout() const override { return data_->layout(); }
  [[nodiscard]] Batch gather(Split split, std::span<const std::size_t> indices) const override {
    if (split == Split::test) {
      const std::lock_guard lock(mutex_);
      seen_.insert(seen_.end(), indices.begin(), indices.end());
    }
    return data_->gather(split, indices);
  }
  [[nodiscard]] std::vector<std::size_t> seen() const {
    const std::lock_guard lock(mutex_);
    auto sorted = seen_;
    std::sort(sorted.begin(), sorted.end());
    return sorted;
  }

 private:
  std::shared_ptr<const Dataset> data_;
  mutable std::mutex mutex_;
  mutable std::vector<std::size_t> seen_;
};

// eval_samples = 5 of 23 test windows: every (23 / 5)-th, dealt over the two ranks, once.
TEST(GptStrategies, AnEvaluationSubsetIsSpreadEvenlyOverTheTestSplit) {
  const auto data = std::make_shared<RecordedTestWindows>(text());
  auto o = options(8, 1);
  o.eval_samples = 5;
  const auto result = train("ddp", 2, o, data);
  EXPECT_EQ(data->seen(), (std::vector<std::size_t>{0, 4, 9, 13, 18}));
  EXPECT_GT(result.test_loss, 0.0);
}

TEST(GptStrategies, WindowsTheModelDoesNotTakeAreRefusedNamingBothLayouts) {
  const auto data = std::make_shared<GeneratedText>(8, 10, 2);  // context 8, the model's is 7
  testing::run_ranks(1, [&](std::shared_ptr<Communicator> world) {
    TrainerComponents parts{
        world, tiny_gpt(),           std::make_shared<adam::AdamOptimizer>(adam::AdamConfig{}),
        data,  make_strategy("ddp"), "ddp"};
    try {
      Trainer trainer(options(4, 1), parts);
      FAIL() << "a context-8 data set was accepted by a context-7 model";
    } catch (const ConfigError& e) {
      EXPECT_NE(std::string(e.what()).find("the data set gives samples of i64 8 in, 8 targets of "
                                           "29 classes, the model takes i64 7 in, 7 targets of 29 "
                                           "classes"),
                std::string::npos)
          << e.what();
    }
  });
}

// --- The head tied to the token embedding ----------------------------------------------------

constexpr std::size_t kTiedElements = 8928;  // tiny_gpt()'s 9,450 less lm_head's 29 x 18

// The whole model's parameters as rank 0 of `strategy` holds them after training (zero3's
// gathered from every rank, so every rank calls this).
std::vector<float> whole_parameters(Strategy& strategy) {
  if (auto* ddp = dynamic_cast<ddp::DdpStrategy*>(&strategy)) return ddp->host_parameters();
  if (auto* zero3 = dynamic_cast<zero3::Zero3Strategy*>(&strategy)) {
    return zero3->gather_parameters();
  }
  auto& zero = dynamic_cast<zero::ZeroStrategy&>(strategy);
  const auto values = zero.parameters();
  return {values.begin(), values.begin() + static_cast<std::ptrdiff_t>(zero.flat_layout().total)};
}

TEST(GptStrategies, TheTiedHeadIsOneParameterWithTheSameBitsUnderDdpAndEveryZeroStage) {
  ASSERT_EQ(FlatLayout::of(*tiny_gpt()).total, kTiedElements);
  const auto data = text();
  std::map<std::string, std::vector<float>> params;
  std::mutex mutex;
  for (const std::string name : {"ddp", "zero1", "zero2", "zero3"}) {
    const auto result =
        train(name, 2, options(8, 1), data, {.inspect = [&](Strategy& strategy, int rank) {
                auto values = whole_parameters(strategy);
                const std::lock_guard lock(mutex);
                if (rank == 0) params[name] = std::move(values);
              }});
    // Reported once: the summary's parameter bytes of ddp's rank are the tied model's.
    if (name == "ddp") {
      EXPECT_EQ(result.ranks.at(0).memory.parameter_bytes, kTiedElements * sizeof(float));
    }
  }
  ASSERT_EQ(params["ddp"].size(), kTiedElements);
  for (const std::string name : {"zero1", "zero2", "zero3"}) {
    EXPECT_EQ(params[name], params["ddp"]) << name;
  }
}

// wte on the first stage and its copy on the last (the head's) take the same update: their
// gradients are summed over the two stages before each step.
TEST(GptStrategies, TheTiedEmbeddingsCopiesOnTheFirstAndLastStageStayBitwiseEqual) {
  const auto data = text();
  auto o = options(16, 1);
  o.micro_batches = 2;
  std::vector<std::vector<float>> wte(2);
  std::vector<bool> copy_on_stage(2, false);
  const auto result =
      train("hybrid_pp2", 2, o, data, {.inspect = [&](Strategy& strategy, int rank) {
              auto& hybrid = dynamic_cast<hybrid::HybridStrategy&>(strategy);
              for (const auto& held : hybrid.held_parameters()) {
                if (held.layer != 0 || held.spec.name != "wte") continue;
                wte[static_cast<std::size_t>(rank)].assign(held.values.begin(), held.values.end());
                copy_on_stage[static_cast<std::size_t>(rank)] = hybrid.stage().first > 0;
              }
            }});
  ASSERT_EQ(result.steps, 7);
  EXPECT_FALSE(copy_on_stage[0]);
  EXPECT_TRUE(copy_on_stage[1]) << "the last stage holds a copy of wte for the head";
  ASSERT_EQ(wte[0].size(), kVocab * 18);
  EXPECT_EQ(wte[1], wte[0]);
  // A copy that never moved would equal its initial values (every strategy's: init.hpp).
  std::vector<float> untrained(kVocab * 18);
  initialize_parameter(tiny_gpt()->layer(0).parameters()[0], o.seed, 0, untrained);
  EXPECT_NE(wte[1], untrained);
}

// Two data-parallel replicas of two stages, each replica's stages summing the tied gradient
// after the data group's average: the micro-batches of one rank of ddp.
TEST(GptStrategies, TwoReplicasOfTwoStagesWithTheTiedHeadFollowOneRankOfDdp) {
  const auto data = text();
  auto o = options(8, 1);
  const auto pipeline = train("hybrid_pp2", 4, o, data);
  o.batch_size = 16;
  o.micro_batches = 2;
  const auto ddp = train("ddp", 1, o, data);
  ASSERT_EQ(pipeline.losses.size(), ddp.losses.size());
  for (std::size_t s = 0; s < ddp.losses.size(); ++s) {
    EXPECT_NEAR(pipeline.losses[s], ddp.losses[s], 1e-5 * ddp.losses[s]) << "step " << s;
  }
  EXPECT_NEAR(pipeline.test_loss, ddp.test_loss, 1e-5 * ddp.test_loss);
}

// ddp, zero3 and two pipeline stages write the tied parameter once (as wte of layer 0), and a
// run resumed from step 4 continues the uninterrupted one's losses bit for bit.
TEST(GptStrategies, ACheckpointHoldsTheTiedParameterOnceAndResumesBitwise) {
  namespace fs = std::filesystem;
  const auto data = text();
  for (const std::string name : {"ddp", "zero3", "hybrid_pp2"}) {
    const fs::path root =
        fs::temp_directory_path() / ("tessera-gpt-tied-" + std::to_string(::getpid()) + "-" + name);
    fs::remove_all(root);
    const auto whole = train(name, 2, options(8, 1), data);
    ASSERT_GT(whole.steps, 4);  // 7 over two data ranks, 13 over one (two stages)
    auto first = options(8, 1);
    first.checkpoint_dir = root;
    first.checkpoint_every = 2;
    first.max_steps = 4;
    ASSERT_EQ(train(name, 2, first, data).steps, 4);

    const FileCheckpointReader reader(*latest_checkpoint(root));
    const SliceReader slices(reader);
    const auto& held = slices.index().params;
    EXPECT_EQ(held.size(), FlatLayout::of(*tiny_gpt()).params.size()) << name;
    EXPECT_EQ(std::count_if(held.begin(), held.end(),
                            [](const ParamId& p) { return p.name == "wte" && p.layer == 0; }),
              1)
        << name;
    EXPECT_EQ(std::count_if(held.begin(), held.end(),
                            [](const ParamId& p) { return p.name == "lm_head.weight"; }),
              0)
        << name;

    auto second = options(8, 1);
    second.checkpoint_dir = root;
    const auto resumed = train(name, 2, second, data, {.resume = true});
    EXPECT_EQ(resumed.resumed_from_step, 4) << name;
    const std::vector<double> rest(whole.losses.begin() + 4, whole.losses.end());
    EXPECT_EQ(resumed.losses, rest) << name;
    EXPECT_EQ(resumed.test_loss, whole.test_loss) << name;
    fs::remove_all(root);
  }
}

// Two layers whose parameters are given, for the refusals of a tie.
class SpecsOnly final : public Layer {
 public:
  SpecsOnly(std::string name, std::vector<ParamSpec> specs)
      : name_(std::move(name)), specs_(std::move(specs)) {}
  [[nodiscard]] std::string name() const override { return name_; }
  [[nodiscard]] std::vector<ParamSpec> parameters() const override { return specs_; }
  [[nodiscard]] Shape output_shape(const Shape& input) const override { return input; }
  Tensor forward(const Tensor& input, std::span<const BufferView>, LayerContext&) const override {
    return input.alias();
  }
  Tensor backward(const Tensor& grad, std::span<const BufferView>, std::span<const BufferView>,
                  LayerContext&) const override {
    return grad.alias();
  }

 private:
  std::string name_;
  std::vector<ParamSpec> specs_;
};

class TwoLayers final : public Model {
 public:
  explicit TwoLayers(Shape tied_shape)
      : embed_("embed", {{"table", {10, 4}, DType::f32, ParamInit::ones, 4, 10, {}}}),
        head_("head", {[&] {
                ParamSpec spec{"head.weight", std::move(tied_shape), DType::f32, ParamInit::ones};
                spec.tied_to = "table";
                return spec;
              }()}) {}
  [[nodiscard]] SampleLayout layout() const override { return {DType::f32, {4}, {}, 10}; }
  [[nodiscard]] std::size_t layer_count() const noexcept override { return 2; }
  [[nodiscard]] const Layer& layer(std::size_t index) const override {
    return index == 0 ? static_cast<const Layer&>(embed_) : head_;
  }
  [[nodiscard]] LossResult loss(const Tensor&, const Tensor&) const override { return {}; }

 private:
  SpecsOnly embed_, head_;
};

TEST(GptStrategies, ATieBetweenShapesThatDifferIsRefusedNamingBothLayers) {
  EXPECT_EQ(FlatLayout::of(TwoLayers({10, 4})).params.size(), 1U);  // the same shape: one
  testing::run_ranks(1, [&](std::shared_ptr<Communicator> world) {
    ddp::DdpStrategy strategy(ddp::DdpConfig{});
    StrategySetup setup;
    setup.world = world;
    setup.model = std::make_shared<TwoLayers>(Shape{4, 10});
    setup.optimizer = std::make_shared<adam::AdamOptimizer>(adam::AdamConfig{});
    try {
      strategy.setup(setup);
      FAIL() << "a [4, 10] head tied to a [10, 4] table was accepted";
    } catch (const ConfigError& e) {
      EXPECT_NE(std::string(e.what()).find(
                    "layer 1 (head) ties its parameter head.weight to 'table' of layer 0 (embed), "
                    "but they differ: head.weight is f32 4x10, table is f32 10x4; a tied "
                    "parameter needs its owner's shape and dtype"),
                std::string::npos)
          << e.what();
    }
  });
}

}  // namespace
}  // namespace tessera
