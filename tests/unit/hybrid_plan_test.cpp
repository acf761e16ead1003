// The hybrid strategy's pure planning: the mesh's coordinates and groups, the cut of layers into
// pipeline stages, the tensor-parallel roles, and the pipeline schedules (order, activations in
// flight, and that the stages' sends and receives always match up).
#include <gtest/gtest.h>

#include <algorithm>
#include <set>

#include "ddp_test_support.hpp"
#include "gpt/gpt_model.hpp"
#include "mesh.hpp"
#include "mlp/mlp_model.hpp"
#include "model_split.hpp"
#include "pipeline_schedule.hpp"
#include "tessera/base/error.hpp"

namespace tessera::hybrid {
namespace {

using Role = TensorParallelRole;

TEST(HybridMesh, RanksAreOrderedTensorInnermostThenDataThenPipeline) {
  const Mesh mesh(8, 2, 2);
  EXPECT_EQ(mesh.data_size(), 2);
  EXPECT_EQ(mesh.coordinates(0), (MeshCoordinates{0, 0, 0}));
  EXPECT_EQ(mesh.coordinates(1), (MeshCoordinates{1, 0, 0}));
  EXPECT_EQ(mesh.coordinates(2), (MeshCoordinates{0, 1, 0}));
  EXPECT_EQ(mesh.coordinates(5), (MeshCoordinates{1, 0, 1}));
  EXPECT_EQ(mesh.coordinates(7), (MeshCoordinates{1, 1, 1}));
  for (int r = 0; r < 8; ++r) EXPECT_EQ(mesh.rank_of(mesh.coordinates(r)), r);
  EXPECT_EQ(mesh.tensor_group(5), (std::vector<int>{4, 5}));
  EXPECT_EQ(mesh.data_group(5), (std::vector<int>{5, 7}));
  EXPECT_EQ(mesh.pipeline_group(5), (std::vector<int>{1, 5}));
}

TEST(HybridMesh, GroupsOfEachKindPartitionTheWorld) {
  const Mesh mesh(12, 2, 3);
  EXPECT_EQ(mesh.data_size(), 2);
  for (auto group_of : {&Mesh::tensor_group, &Mesh::data_group, &Mesh::pipeline_group}) {
    std::multiset<int> seen;
    for (int r = 0; r < 12; ++r) {
      const auto group = (mesh.*group_of)(r);
      EXPECT_NE(std::find(group.begin(), group.end(), r), group.end());
      if (group.front() == r) seen.insert(group.begin(), group.end());
    }
    EXPECT_EQ(seen.size(), 12U);
    for (int r = 0; r < 12; ++r) EXPECT_EQ(seen.count(r), 1U);
  }
}

TEST(HybridMesh, AWorldThatTheSizesDoNotDivideIsAConfigErrorNamingThem) {
  try {
    (void)Mesh(6, 2, 2);
    FAIL() << "a world of 6 with tp 2 x pp 2 was accepted";
  } catch (const ConfigError& e) {
    const std::string text = e.what();
    EXPECT_NE(text.find("tensor_parallel = 2"), std::string::npos) << text;
    EXPECT_NE(text.find("pipeline_parallel = 2"), std::string::npos) << text;
    EXPECT_NE(text.find("the world has 6 ranks"), std::string::npos) << text;
  }
  EXPECT_THROW((void)Mesh(4, 0, 1), ConfigError);
  EXPECT_THROW((void)Mesh(4, 8, 1), ConfigError);
}

TEST(HybridMesh, SplitGivesEachRankItsThreeGroups) {
  const Mesh mesh(8, 2, 2);
  std::vector<std::vector<int>> sizes(8);
  testing::run_ranks(8, [&](std::shared_ptr<Communicator> world) {
    const MeshGroups groups(*world, mesh);
    EXPECT_EQ(groups.at, mesh.coordinates(world->rank()));
    // The sum over each group of the world rank names the group's members.
    auto sum = [&](Communicator& group) {
      std::int64_t value = world->rank();
      group.all_reduce({&value, 1, DType::i64, Device::cpu()}, ReduceOp::sum)->wait();
      return static_cast<int>(value);
    };
    const auto total = [](const std::vector<int>& ranks) {
      int s = 0;
      for (int r : ranks) s += r;
      return s;
    };
    EXPECT_EQ(sum(*groups.tensor), total(mesh.tensor_group(world->rank())));
    EXPECT_EQ(sum(*groups.data), total(mesh.data_group(world->rank())));
    EXPECT_EQ(sum(*groups.pipeline), total(mesh.pipeline_group(world->rank())));
  });
}

TEST(HybridPartition, UniformCutsNearEqualLayerCountsFirstStagesLarger) {
  const std::vector<double> costs(7, 1.0);
  EXPECT_EQ(partition_layers(costs, 2, PartitionKind::uniform),
            (std::vector<StageRange>{{0, 4}, {4, 7}}));
  EXPECT_EQ(partition_layers(costs, 3, PartitionKind::uniform),
            (std::vector<StageRange>{{0, 3}, {3, 5}, {5, 7}}));
  EXPECT_EQ(partition_layers(costs, 1, PartitionKind::uniform), (std::vector<StageRange>{{0, 7}}));
}

TEST(HybridPartition, BalancedMinimisesTheLargestStageCost) {
  // One heavy layer first: uniform would put 10 + 1 + 1 against 1 + 1 + 1.
  const std::vector<double> costs{10, 1, 1, 1, 1, 1};
  EXPECT_EQ(partition_layers(costs, 2, PartitionKind::balanced),
            (std::vector<StageRange>{{0, 1}, {1, 6}}));
  const std::vector<double> even{2, 2, 2, 2};
  EXPECT_EQ(partition_layers(even, 2, PartitionKind::balanced),
            (std::vector<StageRange>{{0, 2}, {2, 4}}));
  const std::vector<double> tail{1, 1, 1, 1, 1, 9};
  EXPECT_EQ(partition_layers(tail, 3, PartitionKind::balanced),
            (std::vector<StageRange>{{0, 3}, {3, 5}, {5, 6}}));
}

TEST(HybridPartition, MoreStagesThanLayersIsAConfigError) {
  const std::vector<double> costs(3, 1.0);
  EXPECT_THROW((void)partition_layers(costs, 4, PartitionKind::uniform), ConfigError);
  EXPECT_THROW((void)partition_layers(costs, 4, PartitionKind::balanced), ConfigError);
}

TEST(HybridPartition, CostsCountParametersTwiceAndOutputsOnce) {
  mlp::MlpConfig config;
  config.sizes = {4, 8, 2};  // fc0 (4 -> 8), act0, fc1 (8 -> 2)
  const mlp::MlpModel model(config);
  EXPECT_EQ(estimated_layer_costs(model),
            (std::vector<double>{2.0 * (32 + 8) + 8, 8, 2.0 * (16 + 2) + 2}));
}

// GPT-2's layout in small: the embedding (a [5000 x 96] table), 12 blocks, ln_f and the head
// tied to the table. Counted as 2 x its elements, the table would weigh 4.3 blocks and pull
// the cut two blocks early; it looks rows up, so only its output counts, and the first stage
// takes eight blocks against the second's four and the head (4.6 blocks of products).
TEST(HybridPartition, AnEmbeddingFedTokenIdsCostsItsOutputNotItsTable) {
  gpt::GptConfig config;
  config.shape = {12, 4, 96, 16, 5000, true};
  const gpt::GptModel model(config);
  const auto costs = estimated_layer_costs(model);
  ASSERT_EQ(costs.size(), 15U);
  EXPECT_EQ(costs[0], 16.0 * 96);  // [T, C] out per sample, nothing per table element
  const double block = 2.0 * (12 * 96 * 96 + 13 * 96) + 16 * 96;
  for (std::size_t l = 1; l <= 12; ++l) EXPECT_EQ(costs[l], block) << l;
  EXPECT_EQ(costs[14], 2.0 * 5000 * 96 + 16 * 5000);  // the head multiplies by every element
  EXPECT_EQ(partition_layers(costs, 2, PartitionKind::balanced),
            (std::vector<StageRange>{{0, 9}, {9, 15}}));
}

mlp::MlpModel mlp_of(std::vector<std::size_t> sizes) {
  mlp::MlpConfig config;
  config.sizes = std::move(sizes);
  return mlp::MlpModel(config);
}

TEST(HybridTensorRoles, ConsecutiveLinearPairsBecomeColumnThenRow) {
  const auto four = mlp_of({6, 8, 10, 4, 2});  // fc0 act fc1 act fc2 act fc3
  EXPECT_EQ(tensor_parallel_roles(four, 2),
            (std::vector<Role>{Role::column, Role::replicate, Role::row, Role::replicate,
                               Role::column, Role::replicate, Role::row}));
  const auto three = mlp_of({6, 8, 10, 4});  // the third Linear has no partner
  EXPECT_EQ(tensor_parallel_roles(three, 2),
            (std::vector<Role>{Role::column, Role::replicate, Role::row, Role::replicate,
                               Role::replicate}));
  EXPECT_EQ(tensor_parallel_roles(four, 1), std::vector<Role>(7, Role::replicate));
}

TEST(HybridTensorRoles, ATensorSizeThatDoesNotDivideASplitLayerIsRefused) {
  const auto odd = mlp_of({6, 9, 10, 4, 2});  // fc0's 9 outputs do not split over 2
  try {
    (void)tensor_parallel_roles(odd, 2);
    FAIL() << "tensor_parallel = 2 over 9 features was accepted";
  } catch (const ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find("does not divide the 9 output features of layer 0"),
              std::string::npos)
        << e.what();
  }
  EXPECT_THROW((void)tensor_parallel_roles(mlp_of({6, 3}), 2), ConfigError);  // nothing to pair
  EXPECT_THROW((void)tensor_parallel_roles(mlp_of({6, 2, 6, 2}), 4), ConfigError);  // 2 < 4
}

std::vector<std::vector<PipelineAction>> all_stages(ScheduleKind kind, std::size_t stages,
                                                    std::size_t m) {
  std::vector<std::vector<PipelineAction>> out;
  for (std::size_t s = 0; s < stages; ++s) out.push_back(stage_actions(kind, s, stages, m));
  return out;
}

// Runs the stages' lists with eager sends and blocking receives, round-robin, as far as they
// go; returns whether every stage finished. A receive must find the matching send (peer,
// kind, micro-batch) at the head of its channel, as in-order point-to-point delivers it.
bool runs_to_completion(const std::vector<std::vector<PipelineAction>>& stages) {
  const std::size_t n = stages.size();
  // channel[from][to]: messages sent and not yet received, in order.
  std::vector<std::vector<std::vector<PipelineAction>>> channel(
      n, std::vector<std::vector<PipelineAction>>(n));
  std::vector<std::size_t> at(n, 0);
  for (bool progress = true; progress;) {
    progress = false;
    for (std::size_t s = 0; s < n; ++s) {
      while (at[s] < stages[s].size()) {
        const auto& action = stages[s][at[s]];
        const std::size_t k = action.micro_batch;
        if (action.kind == ActionKind::send_activation) {
          channel[s][s + 1].push_back({ActionKind::recv_activation, k});
        } else if (action.kind == ActionKind::send_gradient) {
          channel[s][s - 1].push_back({ActionKind::recv_gradient, k});
        } else if (action.kind == ActionKind::recv_activation ||
                   action.kind == ActionKind::recv_gradient) {
          const std::size_t from = action.kind == ActionKind::recv_activation ? s - 1 : s + 1;
          auto& queue = channel[from][s];
          if (queue.empty()) break;  // blocked
          EXPECT_EQ(queue.front(), action) << "stage " << s << " received out of order";
          queue.erase(queue.begin());
        }
        ++at[s];
        progress = true;
      }
    }
  }
  for (std::size_t s = 0; s < n; ++s) {
    if (at[s] != stages[s].size()) return false;
  }
  return true;
}

class HybridSchedule
    : public ::testing::TestWithParam<std::tuple<ScheduleKind, std::size_t, std::size_t>> {};

TEST_P(HybridSchedule, EveryMicroBatchRunsForwardThenBackwardOnceOnEveryStage) {
  const auto [kind, stages, m] = GetParam();
  for (const auto& actions : all_stages(kind, stages, m)) {
    std::vector<int> forward_at(m, -1), backward_at(m, -1);
    std::vector<std::size_t> backward_order;
    for (std::size_t i = 0; i < actions.size(); ++i) {
      const auto k = actions[i].micro_batch;
      if (actions[i].kind == ActionKind::forward) {
        EXPECT_EQ(forward_at[k], -1);
        forward_at[k] = static_cast<int>(i);
      }
      if (actions[i].kind == ActionKind::backward) {
        EXPECT_EQ(backward_at[k], -1);
        backward_at[k] = static_cast<int>(i);
        backward_order.push_back(k);
      }
    }
    for (std::size_t k = 0; k < m; ++k) {
      EXPECT_GE(forward_at[k], 0);
      EXPECT_GT(backward_at[k], forward_at[k]) << "micro-batch " << k;
    }
    // Gradients accumulate in micro-batch order, as one rank adds them.
    EXPECT_TRUE(std::is_sorted(backward_order.begin(), backward_order.end()));
  }
}

TEST_P(HybridSchedule, SendsAndReceivesMatchWithoutDeadlock) {
  const auto [kind, stages, m] = GetParam();
  EXPECT_TRUE(runs_to_completion(all_stages(kind, stages, m)));
}

TEST_P(HybridSchedule, OneFOneBHoldsAtMostStagesMicroBatchesGPipeAllOfThem) {
  const auto [kind, stages, m] = GetParam();
  const auto lists = all_stages(kind, stages, m);
  for (std::size_t s = 0; s < stages; ++s) {
    const std::size_t held = max_in_flight(lists[s]);
    if (kind == ScheduleKind::gpipe) {
      EXPECT_EQ(held, m) << "stage " << s;
    } else {
      EXPECT_EQ(held, std::min(m, stages - s)) << "stage " << s;
    }
  }
}

INSTANTIATE_TEST_SUITE_P(
    KindsStagesMicroBatches, HybridSchedule,
    ::testing::Combine(::testing::Values(ScheduleKind::gpipe, ScheduleKind::one_f_one_b),
                       ::testing::Values(std::size_t{1}, std::size_t{2}, std::size_t{4}),
                       ::testing::Values(std::size_t{1}, std::size_t{3}, std::size_t{8})));

TEST(HybridScheduleSimulation, AScheduleWhoseStagesWaitOnEachOtherIsCaught) {
  // Stage 0 waits for a gradient before sending the activation stage 1 needs first.
  const std::vector<std::vector<PipelineAction>> crossed{
      {{ActionKind::forward, 0}, {ActionKind::recv_gradient, 0}, {ActionKind::send_activation, 0}},
      {{ActionKind::recv_activation, 0}, {ActionKind::send_gradient, 0}}};
  EXPECT_FALSE(runs_to_completion(crossed));
}

TEST(HybridSchedule, RecomputeSavesMemoryOnlyWhereOtherComputeWaitsBeforeTheBackward) {
  const std::vector<bool> every(8, true);
  const std::vector<bool> none(8, false);
  // 1F1B: stage 0 of 2 runs F0 F1 B0 F2 B1 ... F7 B6 B7: each forward is followed by other work.
  EXPECT_EQ(
      waits_between_forward_and_backward(stage_actions(ScheduleKind::one_f_one_b, 0, 2, 8), 8),
      every);
  // The last stage runs F k, B k for every k.
  EXPECT_EQ(
      waits_between_forward_and_backward(stage_actions(ScheduleKind::one_f_one_b, 1, 2, 8), 8),
      none);
  // GPipe: every forward first, on every stage, the last included.
  for (std::size_t s = 0; s < 2; ++s) {
    EXPECT_EQ(waits_between_forward_and_backward(stage_actions(ScheduleKind::gpipe, s, 2, 8), 8),
              every)
        << "stage " << s;
  }
  // One micro-batch: nothing else runs between its forward and backward.
  EXPECT_EQ(waits_between_forward_and_backward(stage_actions(ScheduleKind::gpipe, 0, 2, 1), 1),
            std::vector<bool>{false});
  // A hand-made list: F0 F1 B1 B0 keeps micro-batch 1 (its backward is next), recomputes 0.
  const std::vector<PipelineAction> nested{{ActionKind::forward, 0},
                                           {ActionKind::forward, 1},
                                           {ActionKind::send_activation, 1},
                                           {ActionKind::backward, 1},
                                           {ActionKind::backward, 0}};
  EXPECT_EQ(waits_between_forward_and_backward(nested, 2), (std::vector<bool>{true, false}));
  EXPECT_THROW((void)waits_between_forward_and_backward(nested, 1), InvalidArgument);
}

// A forward that ends the list has no backward after it: nothing uses its activations soon, so
// it is one to recompute, like a forward that other compute follows.
TEST(HybridSchedule, AForwardThatEndsTheListIsMarkedForRecompute) {
  EXPECT_EQ(waits_between_forward_and_backward({{ActionKind::forward, 0}}, 1),
            std::vector<bool>{true});
  const std::vector<PipelineAction> open_end{{ActionKind::forward, 0},
                                             {ActionKind::backward, 0},
                                             {ActionKind::forward, 1},
                                             {ActionKind::send_activation, 1}};
  EXPECT_EQ(waits_between_forward_and_backward(open_end, 2), (std::vector<bool>{false, true}));
}

TEST(HybridSchedule, TheoreticalBubbleIsStagesMinusOneOverMicroBatchesPlusStagesMinusOne) {
  EXPECT_DOUBLE_EQ(theoretical_bubble(1, 4), 0.0);
  EXPECT_DOUBLE_EQ(theoretical_bubble(2, 8), 1.0 / 9.0);
  EXPECT_DOUBLE_EQ(theoretical_bubble(4, 4), 3.0 / 7.0);
  EXPECT_EQ(parse_schedule("gpipe"), ScheduleKind::gpipe);
  EXPECT_EQ(parse_schedule("1f1b"), ScheduleKind::one_f_one_b);
  EXPECT_THROW((void)parse_schedule("interleaved"), ConfigError);
}

}  // namespace
}  // namespace tessera::hybrid
