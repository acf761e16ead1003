// The hybrid strategy trained over every mesh of tensor, pipeline and data size in {1, 2}
// (ranks as threads over the local transport) against ddp: the loss curve of each mesh equals
// the one-rank run on the same global batch to 1e-5 relative at every step, repeats bitwise,
// and with tp = 1 equals ddp's bits at the same data-parallel size and micro-batches.
#include "hybrid_strategy.hpp"

#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <numeric>
#include <string>

#include "adam/adam.hpp"
#include "ddp_strategy.hpp"
#include "ddp_test_support.hpp"
#include "mlp/mlp_model.hpp"
#include "synthetic/synthetic.hpp"
#include "tessera/base/error.hpp"
#include "tessera/base/trace.hpp"
#include "tessera/strategy_kit/memory_state.hpp"
#include "tessera/strategy_kit/param_checkpoint.hpp"

namespace tessera::hybrid {
namespace {

using testing::run_ranks;

// fc0 act fc1 act fc2 act fc3: two Linear pairs for the tensor group, seven layers for stages.
std::shared_ptr<const Model> pair_mlp(std::vector<std::size_t> sizes = {16, 32, 24, 32, 8}) {
  mlp::MlpConfig config;
  config.sizes = std::move(sizes);
  return std::make_shared<mlp::MlpModel>(config);
}

std::shared_ptr<const Dataset> data() {
  synthetic::SyntheticConfig config;
  config.samples = 4096;
  config.test_samples = 64;
  config.features = 16;
  config.classes = 8;
  return std::make_shared<synthetic::SyntheticDataset>(config);
}

std::shared_ptr<const Optimizer> adam() {
  return std::make_shared<adam::AdamOptimizer>(adam::AdamConfig{});
}

struct MeshSpec {
  int tp = 1;
  int pp = 1;
  int dp = 1;
  ScheduleKind schedule = ScheduleKind::one_f_one_b;
  bool recompute = false;
  bool zero1 = false;
  PartitionKind partition = PartitionKind::uniform;
};

struct RunSpec {
  std::size_t global_batch = 16;
  int steps = 200;
  std::size_t micro_batches = 4;
  double max_grad_norm = 0.5;
  std::vector<std::size_t> sizes = {16, 32, 24, 32, 8};  // pair_mlp's layer sizes
};

struct RunResult {
  std::vector<double> losses;
  std::vector<double> norms;
  std::vector<float> params;  // the whole model after the last step
};

// Step s takes global samples [s * G, (s + 1) * G); data-parallel replica r takes its rows
// [r * G / dp, (r + 1) * G / dp). Every rank must report the same loss and norm.
template <class Strategy>
RunResult drive(Strategy& strategy, const RunSpec& spec, int first_step = 0) {
  const auto placement = strategy.data_parallel_placement();
  const auto replicas = static_cast<std::size_t>(placement.size);
  const std::size_t share = spec.global_batch / replicas;
  const auto dataset = data();
  RunResult result;
  for (int s = first_step; s < first_step + spec.steps; ++s) {
    std::vector<std::size_t> indices(share);
    std::iota(indices.begin(), indices.end(),
              static_cast<std::size_t>(s) * spec.global_batch +
                  static_cast<std::size_t>(placement.rank) * share);
    const auto stats = strategy.train_step(dataset->gather(Split::train, indices),
                                           StepInfo{s + 1, 1e-3F, spec.global_batch});
    result.losses.push_back(stats.loss);
    result.norms.push_back(stats.grad_norm);
  }
  return result;
}

HybridConfig config_of(const MeshSpec& mesh) {
  HybridConfig config;
  config.tensor_parallel = mesh.tp;
  config.pipeline_parallel = mesh.pp;
  config.schedule = mesh.schedule;
  config.recompute = mesh.recompute;
  config.zero1 = mesh.zero1;
  config.partition = mesh.partition;
  config.sync.first_bucket_bytes = 1024;  // several buckets even for a small model
  config.sync.bucket_cap_bytes = 4096;
  return config;
}

RunResult run_hybrid(const MeshSpec& mesh, const RunSpec& spec) {
  const int world = mesh.tp * mesh.pp * mesh.dp;
  std::vector<RunResult> results(static_cast<std::size_t>(world));
  run_ranks(world, [&](std::shared_ptr<Communicator> comm) {
    HybridStrategy strategy(config_of(mesh));
    strategy.setup(
        {comm, pair_mlp(spec.sizes), adam(), 11, spec.max_grad_norm, spec.micro_batches});
    auto mine = drive(strategy, spec);
    mine.params = strategy.gather_parameters();
    results[static_cast<std::size_t>(comm->rank())] = std::move(mine);
  });
  for (std::size_t r = 1; r < results.size(); ++r) {
    EXPECT_EQ(results[r].losses, results[0].losses) << "rank " << r << " reports another loss";
    EXPECT_EQ(results[r].norms, results[0].norms) << "rank " << r << " reports another norm";
  }
  return results[0];
}

RunResult run_ddp(int world, const RunSpec& spec) {
  RunResult result;
  run_ranks(world, [&](std::shared_ptr<Communicator> comm) {
    ddp::DdpStrategy strategy(ddp::DdpConfig{});
    strategy.setup(
        {comm, pair_mlp(spec.sizes), adam(), 11, spec.max_grad_norm, spec.micro_batches});
    auto mine = drive(strategy, spec);
    if (comm->rank() == 0) {
      mine.params.assign(strategy.parameters().begin(), strategy.parameters().end());
      result = std::move(mine);
    }
  });
  return result;
}

double relative_difference(double a, double b) {
  return std::fabs(a - b) / std::max(std::fabs(b), 1e-30);
}

class HybridMesh : public ::testing::TestWithParam<MeshSpec> {};

TEST_P(HybridMesh, LossCurveEqualsOneRankDdpAndRepeatsBitwise) {
  const MeshSpec mesh = GetParam();
  const RunSpec spec;
  const auto reference = run_ddp(1, {.micro_batches = 1});
  const auto first = run_hybrid(mesh, spec);
  ASSERT_EQ(first.losses.size(), reference.losses.size());
  double worst = 0.0;
  for (std::size_t s = 0; s < reference.losses.size(); ++s) {
    worst = std::max(worst, relative_difference(first.losses[s], reference.losses[s]));
    ASSERT_LT(relative_difference(first.losses[s], reference.losses[s]), 1e-5)
        << "step " << s + 1 << ": " << first.losses[s] << " vs " << reference.losses[s];
  }
  EXPECT_LT(reference.losses.back(), 0.8 * reference.losses.front());  // it did learn
  RecordProperty("worst_relative_loss_difference", std::to_string(worst));

  const auto second = run_hybrid(mesh, spec);
  EXPECT_EQ(second.losses, first.losses);
  EXPECT_EQ(second.norms, first.norms);
  EXPECT_TRUE(second.params == first.params) << "parameters differ between two runs";

  if (mesh.tp == 1) {
    // Same data-parallel size, same micro-batches: ddp's rank-order sums and norm blocks.
    const auto ddp = run_ddp(mesh.dp, spec);
    EXPECT_EQ(first.losses, ddp.losses);
    EXPECT_EQ(first.norms, ddp.norms);
    EXPECT_TRUE(first.params == ddp.params) << "parameters differ from ddp's";
  }
}

std::string mesh_name(const ::testing::TestParamInfo<MeshSpec>& info) {
  const auto& m = info.param;
  return "tp" + std::to_string(m.tp) + "_pp" + std::to_string(m.pp) + "_dp" + std::to_string(m.dp) +
         (m.schedule == ScheduleKind::gpipe ? "_gpipe" : "_1f1b");
}

INSTANTIATE_TEST_SUITE_P(EveryMeshOfTwo, HybridMesh,
                         ::testing::Values(MeshSpec{1, 1, 1}, MeshSpec{2, 1, 1}, MeshSpec{1, 2, 1},
                                           MeshSpec{1, 1, 2}, MeshSpec{2, 2, 1}, MeshSpec{2, 1, 2},
                                           MeshSpec{1, 2, 2}, MeshSpec{2, 2, 2},
                                           MeshSpec{1, 2, 1, ScheduleKind::gpipe},
                                           MeshSpec{2, 2, 2, ScheduleKind::gpipe}),
                         mesh_name);

TEST(HybridStrategy, BalancedStagesFollowTheCostsAndKeepDdpsBits) {
  // Costs (2 x parameters + outputs): fc0 1120, act 32, fc1 1608, act 24, fc2 1632, act 32,
  // fc3 536. Two stages balance at [fc0 .. fc1] (2760) against [act .. fc3] (2224).
  std::vector<StageRange> stages(2);
  run_ranks(2, [&](std::shared_ptr<Communicator> comm) {
    HybridStrategy strategy(config_of({.pp = 2, .partition = PartitionKind::balanced}));
    strategy.setup({comm, pair_mlp(), adam(), 11, 0.0, 1});
    stages[static_cast<std::size_t>(comm->rank())] = strategy.stage();
  });
  EXPECT_EQ(stages, (std::vector<StageRange>{{0, 3}, {3, 7}}));
  const RunSpec spec{.steps = 20};
  EXPECT_EQ(run_hybrid({.pp = 2, .partition = PartitionKind::balanced}, spec).losses,
            run_ddp(1, spec).losses);
}

// pair_mlp's 2,400 parameters are one norm block that every stage boundary cuts. With layers of
// 1,632, 6,208, 6,240 and 776 parameters, whole blocks lie inside single stages (pp = 2: block 0
// in stage 0, blocks 2 and 3 in stage 1; pp = 4: block 2 in stage 2) beside cut ones, and the
// norm carried from stage to stage must still be ddp's, bit for bit, every step clipping.
TEST(HybridStrategy, NormBlocksInsideSingleStagesClipAsDdpDoesBitwise) {
  const RunSpec spec{.steps = 20, .max_grad_norm = 0.05, .sizes = {16, 96, 64, 96, 8}};
  for (const MeshSpec mesh : {MeshSpec{.pp = 2}, MeshSpec{.pp = 4}, MeshSpec{.pp = 2, .dp = 2},
                              MeshSpec{.pp = 2, .dp = 2, .zero1 = true}}) {
    SCOPED_TRACE(mesh_name(::testing::TestParamInfo<MeshSpec>(mesh, 0)));
    const auto ddp = run_ddp(mesh.dp, spec);
    ASSERT_GT(*std::min_element(ddp.norms.begin(), ddp.norms.end()), spec.max_grad_norm);
    const auto hybrid = run_hybrid(mesh, spec);
    EXPECT_EQ(hybrid.norms, ddp.norms);
    EXPECT_EQ(hybrid.losses, ddp.losses);
    EXPECT_TRUE(hybrid.params == ddp.params) << "parameters differ from ddp's";
  }
}

TEST(HybridStrategy, AStageBoundaryInsideATensorPairStillMatchesDdp) {
  // pp = 4 over seven layers cuts [fc0 act0][fc1 act1][fc2 act2][fc3]: each pair's column- and
  // row-parallel halves sit on different stages, which pass sliced activations.
  const RunSpec spec{.steps = 30};
  const auto reference = run_ddp(1, {.steps = 30, .micro_batches = 1});
  const auto hybrid = run_hybrid({.tp = 2, .pp = 4, .dp = 1}, spec);
  for (std::size_t s = 0; s < reference.losses.size(); ++s) {
    EXPECT_LT(relative_difference(hybrid.losses[s], reference.losses[s]), 1e-5) << "step " << s;
  }
}

TEST(HybridStrategy, RecomputingTheForwardInBackwardGivesTheSameBits) {
  const RunSpec spec{.steps = 20};
  for (const auto schedule : {ScheduleKind::gpipe, ScheduleKind::one_f_one_b}) {
    const auto kept = run_hybrid({.tp = 2, .pp = 2, .schedule = schedule}, spec);
    const auto recomputed =
        run_hybrid({.tp = 2, .pp = 2, .schedule = schedule, .recompute = true}, spec);
    EXPECT_EQ(recomputed.losses, kept.losses);
    EXPECT_TRUE(recomputed.params == kept.params);
  }
}

// Counts the forwards of every layer of an inner model.
class CountingModel final : public Model {
 public:
  explicit CountingModel(std::shared_ptr<const Model> inner) : inner_(std::move(inner)) {
    for (std::size_t l = 0; l < inner_->layer_count(); ++l) layers_.emplace_back(inner_->layer(l));
  }
  SampleLayout layout() const override { return inner_->layout(); }
  std::size_t layer_count() const noexcept override { return layers_.size(); }
  const Layer& layer(std::size_t index) const override { return layers_.at(index); }
  LossResult loss(const Tensor& logits, const Tensor& targets) const override {
    return inner_->loss(logits, targets);
  }
  std::size_t forwards() const {
    std::size_t total = 0;
    for (const auto& layer : layers_) total += layer.forwards;
    return total;
  }
  // The most micro-batches layer `index` held between a forward and its backward.
  std::size_t peak_in_flight(std::size_t index) const { return layers_.at(index).peak; }

 private:
  struct Counted final : Layer {
    explicit Counted(const Layer& layer) : inner(layer) {}
    Counted(const Counted& other) : Layer(), inner(other.inner) {}
    std::string name() const override { return inner.name(); }
    std::vector<ParamSpec> parameters() const override { return inner.parameters(); }
    Shape output_shape(const Shape& input) const override { return inner.output_shape(input); }
    Tensor forward(const Tensor& input, std::span<const BufferView> params,
                   LayerContext& ctx) const override {
      ++forwards;
      peak = std::max(peak, ++live);
      return inner.forward(input, params, ctx);
    }
    Tensor backward(const Tensor& grad_output, std::span<const BufferView> params,
                    std::span<const BufferView> grads, LayerContext& ctx) const override {
      --live;
      return inner.backward(grad_output, params, grads, ctx);
    }
    const Layer& inner;
    mutable std::size_t forwards = 0;
    mutable std::size_t live = 0;
    mutable std::size_t peak = 0;
  };
  std::shared_ptr<const Model> inner_;
  std::vector<Counted> layers_;
};

TEST(HybridStrategy, RecomputeRunsAStageForwardAgainWhereOtherWorkWaitsBeforeItsBackward) {
  for (const auto schedule : {ScheduleKind::gpipe, ScheduleKind::one_f_one_b}) {
    for (const bool recompute : {false, true}) {
      std::vector<std::size_t> forwards(2);
      run_ranks(2, [&](std::shared_ptr<Communicator> comm) {
        const auto model = std::make_shared<CountingModel>(pair_mlp());
        HybridStrategy strategy(config_of({.pp = 2, .schedule = schedule, .recompute = recompute}));
        strategy.setup({comm, model, adam(), 11, 0.0, 4});
        (void)drive(strategy, {.steps = 1});
        forwards[static_cast<std::size_t>(comm->rank())] = model->forwards();
      });
      // Stage 0 holds layers [0, 4), stage 1 [4, 7); four micro-batches each. Under 1F1B the
      // last stage runs every backward right after its forward: nothing to recompute there.
      const std::size_t first_passes = recompute ? 8 : 4;
      const std::size_t last_passes = recompute && schedule == ScheduleKind::gpipe ? 8 : 4;
      const auto label =
          std::string(schedule_name(schedule)) + " recompute " + (recompute ? "full" : "none");
      EXPECT_EQ(forwards[0], 4 * first_passes) << label;
      EXPECT_EQ(forwards[1], 3 * last_passes) << label;
    }
  }
}

TEST(HybridStrategy, OneFOneBHoldsAtMostTheStagesInFlightGPipeEveryMicroBatch) {
  for (const auto schedule : {ScheduleKind::gpipe, ScheduleKind::one_f_one_b}) {
    std::vector<std::size_t> peaks(2);
    run_ranks(2, [&](std::shared_ptr<Communicator> comm) {
      const auto model = std::make_shared<CountingModel>(pair_mlp());
      HybridStrategy strategy(config_of({.pp = 2, .schedule = schedule}));
      strategy.setup({comm, model, adam(), 11, 0.0, 8});
      (void)drive(strategy, {.steps = 1});
      const std::size_t first_layer = comm->rank() == 0 ? 0 : 4;
      peaks[static_cast<std::size_t>(comm->rank())] = model->peak_in_flight(first_layer);
    });
    if (schedule == ScheduleKind::gpipe) {
      EXPECT_EQ(peaks, (std::vector<std::size_t>{8, 8}));
    } else {
      EXPECT_EQ(peaks, (std::vector<std::size_t>{2, 1}));
    }
  }
}

// The order in which a stage ran its first layer's passes, read back from the rank's trace:
// "F0" for the forward of micro-batch 0, "B0" for its backward, each span labelled with the
// stage that ran it.
std::vector<std::string> traced_passes(const std::filesystem::path& file, std::size_t layer,
                                       int stage) {
  std::ifstream in(file);
  const auto trace = nlohmann::json::parse(in);
  std::vector<std::pair<double, std::string>> passes;
  for (const auto& e : trace.at("traceEvents")) {
    const auto name = e.value("name", "");
    if (e.value("ph", "") != "X" || (name != "forward" && name != "backward")) continue;
    const auto& args = e.at("args");
    if (args.at("layer") != layer) continue;
    EXPECT_EQ(args.at("stage"), stage) << e.dump();
    passes.emplace_back(
        e.at("ts").get<double>(),
        (name == "forward" ? "F" : "B") + std::to_string(args.at("micro_batch").get<int>()));
  }
  std::sort(passes.begin(), passes.end());
  std::vector<std::string> order;
  for (auto& pass : passes) order.push_back(std::move(pass.second));
  return order;
}

TEST(HybridStrategy, TheTraceShowsEachStageRunningItsScheduleLabelledByStageAndMicroBatch) {
  const auto folder =
      std::filesystem::path(::testing::TempDir()) / ("hybrid_trace_" + std::to_string(::getpid()));
  std::filesystem::create_directories(folder);
  for (const auto schedule : {ScheduleKind::gpipe, ScheduleKind::one_f_one_b}) {
    run_ranks(2, [&](std::shared_ptr<Communicator> comm) {
      trace::Recorder recorder(comm->rank());
      const trace::ScopedRecorder installed(&recorder);
      HybridStrategy strategy(config_of({.pp = 2, .schedule = schedule}));
      strategy.setup({comm, pair_mlp(), adam(), 11, 0.0, 4});
      recorder.set_active(true);
      (void)drive(strategy, {.steps = 1});
      recorder.write(folder / ("rank" + std::to_string(comm->rank()) + ".json"), "");
    });
    // Stage 0 runs layers 0-3, stage 1 layers 4-6 (uniform partition of seven layers).
    const auto first = traced_passes(folder / "rank0.json", 0, 0);
    const auto last = traced_passes(folder / "rank1.json", 4, 1);
    if (schedule == ScheduleKind::gpipe) {
      const std::vector<std::string> all_then_back{"F0", "F1", "F2", "F3", "B0", "B1", "B2", "B3"};
      EXPECT_EQ(first, all_then_back);
      EXPECT_EQ(last, all_then_back);
    } else {
      EXPECT_EQ(first, (std::vector<std::string>{"F0", "F1", "B0", "F2", "B1", "F3", "B2", "B3"}));
      EXPECT_EQ(last, (std::vector<std::string>{"F0", "B0", "F1", "B1", "F2", "B2", "F3", "B3"}));
    }
  }
  std::filesystem::remove_all(folder);
}

TEST(HybridStrategy, ReplicatedParametersStayBitwiseEqualAcrossTheTensorGroup) {
  // Layers 0 to 6: fc0 column, fc1 row (its bias whole), fc2 column, fc3 row; after training,
  // every whole parameter must hold the same bits on both tensor ranks, and each slice differ.
  std::vector<std::vector<std::vector<float>>> held(2);
  std::vector<std::vector<bool>> whole(2);
  run_ranks(2, [&](std::shared_ptr<Communicator> comm) {
    HybridStrategy strategy(config_of({.tp = 2}));
    strategy.setup({comm, pair_mlp(), adam(), 11, 0.5, 4});
    (void)drive(strategy, {.steps = 20});
    const auto r = static_cast<std::size_t>(comm->rank());
    for (const auto& p : strategy.held_parameters()) {
      held[r].emplace_back(p.values.begin(), p.values.end());
      whole[r].push_back(p.spec.slice.whole());
    }
  });
  ASSERT_EQ(held[0].size(), 8U);
  ASSERT_EQ(whole[0], whole[1]);
  ASSERT_EQ(std::count(whole[0].begin(), whole[0].end(), true), 2);  // fc1.bias, fc3.bias
  for (std::size_t p = 0; p < held[0].size(); ++p) {
    if (whole[0][p]) {
      EXPECT_TRUE(held[0][p] == held[1][p]) << "parameter " << p;
    } else {
      EXPECT_FALSE(held[0][p] == held[1][p]) << "parameter " << p;
    }
  }
}

TEST(HybridStrategy, AnEmptyReplicaShareAndAnUnevenOneMatchOneRankOnTheirUnion) {
  // Global batch 5: replica 0 takes all five rows, replica 1 none (an epoch's ragged end).
  const auto dataset = data();
  const RunSpec spec{.global_batch = 5, .steps = 5, .micro_batches = 3};
  const auto reference = run_ddp(1, spec);
  for (const MeshSpec mesh : {MeshSpec{.pp = 2, .dp = 2}, MeshSpec{.tp = 2, .dp = 2}}) {
    std::vector<double> losses;
    std::vector<double> norms;
    run_ranks(4, [&](std::shared_ptr<Communicator> comm) {
      HybridStrategy strategy(config_of(mesh));
      strategy.setup({comm, pair_mlp(), adam(), 11, spec.max_grad_norm, spec.micro_batches});
      const auto replica = strategy.data_parallel_placement().rank;
      std::vector<double> mine;
      std::vector<double> my_norms;
      for (int s = 0; s < spec.steps; ++s) {
        std::vector<std::size_t> indices(replica == 0 ? 5 : 0);
        std::iota(indices.begin(), indices.end(), static_cast<std::size_t>(s) * 5);
        const auto stats =
            strategy.train_step(dataset->gather(Split::train, indices), StepInfo{s + 1, 1e-3F, 5});
        mine.push_back(stats.loss);
        my_norms.push_back(stats.grad_norm);
      }
      if (comm->rank() == 0) {
        losses = mine;
        norms = my_norms;
      }
    });
    ASSERT_EQ(losses.size(), reference.losses.size());
    for (std::size_t s = 0; s < losses.size(); ++s) {
      EXPECT_LT(relative_difference(losses[s], reference.losses[s]), 1e-5) << "step " << s;
      // Adam forgets a uniform scale of the gradient, and clipping hides it: a micro-batch
      // weight off by a constant factor leaves the losses as they were, and shows in the norm.
      EXPECT_LT(relative_difference(norms[s], reference.norms[s]), 1e-5) << "step " << s;
    }
  }
}

// The gradient norm is clipping's input, yet with Adam, which forgets a uniform scale of the
// gradient, a wrong norm hardly moves the loss: the norm itself is compared with ddp's. The
// model has 14,856 parameters, four 4096-element norm blocks: a block edge falls inside the
// second stage's parameters and inside tensor slices, which pair_mlp's 2,400 never reach.
TEST(HybridStrategy, GradientNormEqualsDdpsOverNormBlocksCutByStagesAndTensorSlices) {
  const RunSpec spec{.steps = 3, .sizes = {16, 96, 64, 96, 8}};
  const auto ddp = run_ddp(1, spec);
  // tp = 1: the stages carry ddp's blocks across their boundary, so the bits are ddp's.
  EXPECT_EQ(run_hybrid({.pp = 2}, spec).norms, ddp.norms);
  // tp > 1: each slice and the replicated parameters (on tensor rank 0 alone) are summed apart,
  // then over the tensor group; the row-parallel layers' partial sums round otherwise than one
  // rank's, so the norms agree as the losses do, to 1e-5 (measured: 1.2e-7 at the second step).
  // Replicated parameters counted on every tensor rank would be off by far more.
  for (const MeshSpec mesh : {MeshSpec{.tp = 2}, MeshSpec{.tp = 2, .pp = 2}}) {
    const auto norms = run_hybrid(mesh, spec).norms;
    ASSERT_EQ(norms.size(), ddp.norms.size());
    for (std::size_t s = 0; s < norms.size(); ++s) {
      EXPECT_LT(relative_difference(norms[s], ddp.norms[s]), 1e-5)
          << "tp " << mesh.tp << " pp " << mesh.pp << " step " << s + 1 << ": " << norms[s]
          << " vs ddp's " << ddp.norms[s];
    }
  }
}

void expect_config_error(const MeshSpec& mesh, int world, std::vector<std::size_t> sizes,
                         const std::string& expected) {
  try {
    run_ranks(world, [&](std::shared_ptr<Communicator> comm) {
      HybridStrategy strategy(config_of(mesh));
      strategy.setup({comm, pair_mlp(sizes), adam(), 11, 0.0, 1});
    });
    ADD_FAILURE() << "the mesh was accepted; expected: " << expected;
  } catch (const ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find(expected), std::string::npos) << e.what();
  }
}

TEST(HybridStrategy, BadMeshesAreRefusedWithTheOptionsNamed) {
  expect_config_error({.tp = 2, .pp = 2}, 6, {16, 32, 24, 32, 8},
                      "multiple of 4 (tensor_parallel x pipeline_parallel), but the world has 6");
  expect_config_error({.tp = 2}, 2, {16, 33, 24, 32, 8},
                      "tensor_parallel = 2 does not divide the 33 output features of layer 0");
  expect_config_error({.pp = 8}, 8, {16, 32, 24, 32, 8},
                      "pipeline_parallel = 8 stages for a model of 7 layers");
}

TEST(HybridStrategy, EachRankHoldsItsStageSlicesAndOneRankPerReplicaReports) {
  std::vector<MemoryReport> reports(8);
  std::vector<DataParallelPlacement> placements(8);
  run_ranks(8, [&](std::shared_ptr<Communicator> comm) {
    HybridStrategy strategy(config_of({.tp = 2, .pp = 2, .dp = 2}));
    strategy.setup({comm, pair_mlp(), adam(), 11, 0.0, 1});
    const auto r = static_cast<std::size_t>(comm->rank());
    reports[r] = strategy.memory_report();
    placements[r] = strategy.data_parallel_placement();
  });
  // Stage 0: fc0 column (16 x 16 + 16), fc1 row (24 x 16, its whole bias 24) = 680 floats;
  // stage 1: fc2 column (16 x 24 + 16), fc3 row (8 x 16 + 8) = 536; the model has 2400.
  for (std::size_t r = 0; r < 8; ++r) {
    const std::size_t floats = r < 4 ? 680 : 536;
    EXPECT_EQ(reports[r].parameter_bytes, floats * 4) << "rank " << r;
    EXPECT_EQ(reports[r].gradient_bytes, floats * 4) << "rank " << r;
    EXPECT_EQ(reports[r].optimizer_state_bytes, 2 * floats * 4) << "rank " << r;  // Adam
    EXPECT_EQ(placements[r].size, 2);
    EXPECT_EQ(placements[r].rank, static_cast<int>(r / 2) % 2);
    EXPECT_EQ(placements[r].reports_metrics, r == 4 || r == 6) << "rank " << r;
  }
}

TEST(HybridStrategy, EvaluateReportsTheLossOnTheLastStageOnly) {
  const auto dataset = data();
  std::vector<std::size_t> indices(12);
  std::iota(indices.begin(), indices.end(), 40);
  StepStats expected;
  run_ranks(1, [&](std::shared_ptr<Communicator> comm) {
    ddp::DdpStrategy strategy(ddp::DdpConfig{});
    strategy.setup({comm, pair_mlp(), adam(), 11, 0.0, 1});
    expected = strategy.evaluate(dataset->gather(Split::test, indices));
  });
  std::vector<StepStats> stats(4);
  run_ranks(4, [&](std::shared_ptr<Communicator> comm) {
    HybridStrategy strategy(config_of({.tp = 2, .pp = 2}));
    strategy.setup({comm, pair_mlp(), adam(), 11, 0.0, 1});
    stats[static_cast<std::size_t>(comm->rank())] =
        strategy.evaluate(dataset->gather(Split::test, indices));
  });
  EXPECT_NEAR(stats[2].loss, expected.loss, 1e-6 * expected.loss);  // tp 0 of the last stage
  EXPECT_EQ(stats[2].correct, expected.correct);
  EXPECT_EQ(stats[0].correct, 0U);
}

TEST(HybridStrategy, StagesMeasureTheTimeTheyWaitForThePipeline) {
  std::vector<PipelineTiming> timings(2);
  run_ranks(2, [&](std::shared_ptr<Communicator> comm) {
    HybridStrategy strategy(config_of({.pp = 2}));
    strategy.setup({comm, pair_mlp(), adam(), 11, 0.0, 4});
    (void)drive(strategy, {.steps = 10});
    timings[static_cast<std::size_t>(comm->rank())] = strategy.pipeline_timing();
  });
  for (const auto& timing : timings) {
    // The first step after setup pays one-time costs and is left out of the measurement.
    EXPECT_EQ(timing.untimed_steps, 1U);
    EXPECT_EQ(timing.steps, 9U);
    EXPECT_EQ(timing.micro_batches, 4U);
    EXPECT_GT(timing.recv_wait_seconds, 0.0);
    EXPECT_LT(timing.recv_wait_seconds, timing.pipeline_seconds);
    EXPECT_DOUBLE_EQ(timing.theoretical(), 1.0 / 5.0);
  }
}

// Trains `steps` steps from `first_step` on `mesh` after loading `state` (unless null); returns
// the losses and the state as the world's checkpoint would hold it.
std::pair<std::vector<double>, std::shared_ptr<const MemoryCheckpoint>> continue_hybrid(
    const MeshSpec& mesh, const CheckpointReader* state, int first_step, int steps) {
  std::vector<double> losses;
  std::shared_ptr<const MemoryCheckpoint> saved;
  run_ranks(mesh.tp * mesh.pp * mesh.dp, [&](std::shared_ptr<Communicator> comm) {
    HybridStrategy strategy(config_of(mesh));
    strategy.setup({comm, pair_mlp(), adam(), 11, 0.5, 4});
    if (state) strategy.load(*state);
    const auto result = drive(strategy, {.steps = steps}, first_step);
    auto all = gather_state_in_memory(strategy, *comm);
    if (comm->rank() == 0) {
      losses = result.losses;
      saved = std::move(all);
    }
  });
  return {losses, saved};
}

void expect_close(const std::vector<double>& got, const std::vector<double>& want,
                  std::size_t first, const char* what) {
  ASSERT_EQ(got.size() + first <= want.size(), true);
  for (std::size_t s = 0; s < got.size(); ++s) {
    EXPECT_LT(relative_difference(got[s], want[first + s]), 1e-5)
        << what << ", step " << first + s + 1 << ": " << got[s] << " vs " << want[first + s];
  }
}

TEST(HybridCheckpoint, Tp2Pp2ThenDdpThenPp4ThenTp2Dp2ContinuesAsUninterruptedTraining) {
  const auto uninterrupted = run_ddp(1, {.steps = 40, .micro_batches = 1});

  const auto [first, after_first] = continue_hybrid({.tp = 2, .pp = 2}, nullptr, 0, 10);
  expect_close(first, uninterrupted.losses, 0, "hybrid tp2 pp2");
  // Every parameter and state slot is in the checkpoint exactly once: split parameters as
  // their tensor slices, replicated ones once per stage.
  EXPECT_NO_THROW(SliceReader(*after_first).verify());
  bool has_tensor_slice = false;
  for (const auto& slice : after_first->slices())
    has_tensor_slice |= slice.end - slice.begin < slice.shape.at(slice.dim);
  EXPECT_TRUE(has_tensor_slice);

  std::vector<double> second;
  std::shared_ptr<const MemoryCheckpoint> after_second;
  run_ranks(1, [&](std::shared_ptr<Communicator> comm) {
    ddp::DdpStrategy strategy(ddp::DdpConfig{});
    strategy.setup({comm, pair_mlp(), adam(), 11, 0.5, 1});
    strategy.load(*after_first);
    second = drive(strategy, {.steps = 10, .micro_batches = 1}, 10).losses;
    after_second = gather_state_in_memory(strategy, *comm);
  });
  expect_close(second, uninterrupted.losses, 10, "ddp after hybrid tp2 pp2");

  const auto [third, after_third] = continue_hybrid({.pp = 4}, after_second.get(), 20, 10);
  expect_close(third, uninterrupted.losses, 20, "hybrid pp4 after ddp");
  const auto [fourth, unused] = continue_hybrid({.tp = 2, .dp = 2}, after_third.get(), 30, 10);
  expect_close(fourth, uninterrupted.losses, 30, "hybrid tp2 dp2 after hybrid pp4");
}

TEST(HybridStrategy, ShardingTheOptimizerStateOverTheDataGroupGivesTheSameBits) {
  const RunSpec spec{.steps = 20};
  const auto replicated = run_hybrid({.tp = 2, .pp = 2, .dp = 2}, spec);
  const auto sharded = run_hybrid({.tp = 2, .pp = 2, .dp = 2, .zero1 = true}, spec);
  EXPECT_EQ(sharded.losses, replicated.losses);
  EXPECT_EQ(sharded.norms, replicated.norms);
  EXPECT_TRUE(sharded.params == replicated.params);

  std::vector<MemoryReport> reports(4);
  run_ranks(4, [&](std::shared_ptr<Communicator> comm) {
    HybridStrategy strategy(config_of({.pp = 2, .dp = 2, .zero1 = true}));
    strategy.setup({comm, pair_mlp(), adam(), 11, 0.0, 1});
    reports[static_cast<std::size_t>(comm->rank())] = strategy.memory_report();
  });
  // Stage 0 holds 544 + 792 = 1336 floats, stage 1 800 + 264 = 1064; Adam's two slots of half.
  EXPECT_EQ(reports[0].optimizer_state_bytes, 2 * 668 * 4);
  EXPECT_EQ(reports[1].optimizer_state_bytes, 2 * 668 * 4);
  EXPECT_EQ(reports[2].optimizer_state_bytes, 2 * 532 * 4);
}

TEST(HybridCheckpoint, Zero1ShardsOfTheStateLoadAtAnotherMesh) {
  const auto uninterrupted = run_ddp(1, {.steps = 20, .micro_batches = 1});
  const auto [first, state] = continue_hybrid({.pp = 2, .dp = 2, .zero1 = true}, nullptr, 0, 10);
  expect_close(first, uninterrupted.losses, 0, "hybrid pp2 dp2 zero1");
  EXPECT_NO_THROW(SliceReader(*state).verify());
  const auto [second, unused] =
      continue_hybrid({.tp = 2, .dp = 2, .zero1 = true}, state.get(), 10, 10);
  expect_close(second, uninterrupted.losses, 10, "hybrid tp2 dp2 zero1 after pp2 dp2 zero1");
}

TEST(HybridCheckpoint, ACheckpointOfAnotherModelIsRefused) {
  const auto [losses, state] = continue_hybrid({.tp = 2}, nullptr, 0, 1);
  EXPECT_THROW(
      run_ranks(1,
                [&](std::shared_ptr<Communicator> comm) {
                  HybridStrategy strategy(config_of({}));
                  strategy.setup({comm, pair_mlp({16, 32, 24, 32, 4}), adam(), 11, 0.0, 1});
                  strategy.load(*state);
                }),
      CheckpointError);
}

TEST(HybridStrategy, ReconfiguredToHalfTheReplicasContinuesAsUninterruptedTraining) {
  const auto uninterrupted = run_ddp(1, {.steps = 10, .micro_batches = 1});
  std::vector<double> losses;
  run_ranks(4, [&](std::shared_ptr<Communicator> comm) {
    HybridStrategy strategy(config_of({.pp = 2, .dp = 2}));
    strategy.setup({comm, pair_mlp(), adam(), 11, 0.5, 4});
    auto mine = drive(strategy, {.steps = 5});
    const auto state = gather_state_in_memory(strategy, *comm);
    auto smaller = comm->split(comm->rank() < 2 ? 0 : -1, comm->rank());
    if (!smaller) return;  // ranks 2 and 3 leave
    strategy.reconfigure(smaller, *state);
    EXPECT_EQ(strategy.data_parallel_placement().size, 1);
    const auto after = drive(strategy, {.steps = 5}, 5);
    mine.losses.insert(mine.losses.end(), after.losses.begin(), after.losses.end());
    if (comm->rank() == 0) losses = mine.losses;
  });
  expect_close(losses, uninterrupted.losses, 0, "reconfigured");
  EXPECT_EQ(losses.size(), 10U);
}

}  // namespace
}  // namespace tessera::hybrid
