// Layers on slices and the tensor-parallel kit: a Linear split column- or row-parallel holds
// and initialises exactly its slice (a blocked slice too: the heads of Q, K and V), an mlp whose
// middle Linear pair runs over a tensor group of 2 (local transport) and a GPT whose blocks are
// split by heads over 2 and 3 compute what the unsplit model computes.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <mutex>

#include "ddp_test_support.hpp"
#include "gpt/gpt_model.hpp"
#include "layer_test_support.hpp"
#include "layers/activation.hpp"
#include "layers/embedding.hpp"
#include "layers/linear.hpp"
#include "layers/softmax_cross_entropy.hpp"
#include "parallel_layers_support.hpp"
#include "tessera/base/error.hpp"

namespace tessera::testing {
namespace {

using Role = TensorParallelRole;

std::shared_ptr<const layers::ComputeContext> one_thread() {
  return std::make_shared<layers::ComputeContext>(1);
}

TEST(LinearSlice, ColumnParallelHoldsItsOutputRowsOfWeightAndBias) {
  const layers::Linear fc("fc", 4, 11, one_thread());
  const auto slice = fc.sliced(Role::column, {1, 2});
  const auto specs = slice->parameters();
  ASSERT_EQ(specs.size(), 2U);
  EXPECT_EQ(specs[0].name, "fc.weight");
  EXPECT_EQ(specs[0].shape, (Shape{5, 4}));  // 11 = 6 + 5: rank 1 has rows [6, 11)
  EXPECT_EQ(specs[0].slice, (ParamSlice{0, 6, 11, {11, 4}}));
  EXPECT_EQ(specs[0].fan_in, 4U);
  EXPECT_EQ(specs[0].fan_out, 11U);
  EXPECT_EQ(specs[1].shape, (Shape{5}));
  EXPECT_EQ(specs[1].slice, (ParamSlice{0, 6, 11, {11}}));
  EXPECT_EQ(slice->output_shape({3, 4}), (Shape{3, 5}));
}

TEST(LinearSlice, RowParallelHoldsItsInputColumnsAndTheWholeBias) {
  const layers::Linear fc("fc", 11, 3, one_thread());
  const auto slice = fc.sliced(Role::row, {0, 2});
  const auto specs = slice->parameters();
  EXPECT_EQ(specs[0].shape, (Shape{3, 6}));
  EXPECT_EQ(specs[0].slice, (ParamSlice{1, 0, 6, {3, 11}}));
  EXPECT_EQ(specs[0].full_shape(), (Shape{3, 11}));
  EXPECT_EQ(specs[1].shape, (Shape{3}));
  EXPECT_TRUE(specs[1].slice.whole());
}

TEST(LinearSlice, RowParallelPartialsSumToTheWholeOutputWithTheBiasAddedOnce) {
  const layers::Linear fc("fc", 5, 3, one_thread());
  std::vector<float> weight(15);
  std::vector<float> bias{0.5F, -1.0F, 2.0F};
  for (std::size_t i = 0; i < weight.size(); ++i) weight[i] = 0.1F * static_cast<float>(i) - 0.7F;
  const Tensor x = random_tensor({2, 5}, 3);
  const std::vector<BufferView> whole_views{view_of(std::span<float>(weight)),
                                            view_of(std::span<float>(bias))};
  LayerContext ctx;
  const auto expected = values_of(fc.forward(x, whole_views, ctx));

  std::vector<float> sum(6, 0.0F);
  for (int rank = 0; rank < 2; ++rank) {
    const auto part = fc.sliced(Role::row, {rank, 2});
    const auto specs = part->parameters();
    std::vector<float> w(element_count(specs[0].shape));
    copy_slice_from_whole(specs[0], weight, w);
    const auto [begin, end] = TensorSlice{rank, 2}.range_of(5);
    Tensor xs({2, end - begin}, DType::f32);
    for (std::size_t r = 0; r < 2; ++r) {
      for (std::size_t c = begin; c < end; ++c) {
        xs.as<float>()[r * (end - begin) + c - begin] = x.as<float>()[r * 5 + c];
      }
    }
    const std::vector<BufferView> views{view_of(std::span<float>(w)),
                                        view_of(std::span<float>(bias))};
    LayerContext part_ctx;
    const auto y = values_of(part->forward(xs, views, part_ctx));
    for (std::size_t i = 0; i < sum.size(); ++i) sum[i] += y[i];
  }
  for (std::size_t i = 0; i < sum.size(); ++i) EXPECT_NEAR(sum[i], expected[i], 1e-6F) << i;
}

TEST(LinearSlice, RefusesMoreTensorRanksThanFeaturesAndSlicingASlice) {
  const layers::Linear fc("fc1", 3, 2, one_thread());
  EXPECT_THROW((void)fc.sliced(Role::column, {0, 3}), InvalidArgument);
  EXPECT_THROW((void)fc.sliced(Role::row, {0, 4}), InvalidArgument);
  EXPECT_THROW((void)fc.sliced(Role::replicate, {0, 1}), InvalidArgument);
  EXPECT_THROW((void)fc.sliced(Role::column, {2, 2}), InvalidArgument);
  const auto half = fc.sliced(Role::row, {0, 2});
  EXPECT_THROW((void)half->sliced(Role::column, {0, 2}), InvalidArgument);
  try {
    (void)fc.sliced(Role::column, {0, 3});
  } catch (const InvalidArgument& e) {
    EXPECT_NE(std::string(e.what()).find("fc1: cannot split its 2 output features over 3"),
              std::string::npos)
        << e.what();
  }
}

TEST(LinearSlice, ViewsMustHoldTheSliceNotTheWholeParameter) {
  const layers::Linear fc("fc", 4, 6, one_thread());
  const auto slice = fc.sliced(Role::column, {0, 2});
  std::vector<float> weight(24);
  std::vector<float> bias(6);
  const std::vector<BufferView> whole{view_of(std::span<float>(weight)),
                                      view_of(std::span<float>(bias))};
  LayerContext ctx;
  EXPECT_THROW((void)slice->forward(random_tensor({1, 4}, 1), whole, ctx), InvalidArgument);
}

TEST(LinearSlice, ActivationsCannotBeSplitAndSaySo) {
  const layers::Activation relu("act", layers::ActivationKind::relu, one_thread());
  EXPECT_TRUE(relu.sliced(Role::column, {0, 2}) == nullptr);
}

TEST(TensorSlice, SplitsNearEquallyFirstRanksLarger) {
  EXPECT_EQ((TensorSlice{0, 3}.range_of(10)), (std::pair<std::size_t, std::size_t>{0, 4}));
  EXPECT_EQ((TensorSlice{1, 3}.range_of(10)), (std::pair<std::size_t, std::size_t>{4, 7}));
  EXPECT_EQ((TensorSlice{2, 3}.range_of(10)), (std::pair<std::size_t, std::size_t>{7, 10}));
  EXPECT_THROW((void)(TensorSlice{0, 3}.range_of(2)), InvalidArgument);
}

TEST(ParamSliceKit, InitialisesAndCopiesSlicesAsTheWholeParameterHasThem) {
  const layers::Linear fc("fc", 7, 5, one_thread());
  const ParamSpec whole_spec = fc.parameters()[0];
  std::vector<float> whole(35);
  initialize_parameter(whole_spec, 11, 4, whole);
  std::vector<float> rebuilt(35, std::nanf(""));
  for (const Role role : {Role::column, Role::row}) {
    for (int rank = 0; rank < 2; ++rank) {
      const ParamSpec spec = fc.sliced(role, {rank, 2})->parameters()[0];
      std::vector<float> initialised(element_count(spec.shape));
      std::vector<float> copied(initialised.size());
      initialize_parameter(spec, 11, 4, initialised);
      copy_slice_from_whole(spec, whole, copied);
      EXPECT_EQ(std::memcmp(initialised.data(), copied.data(), copied.size() * sizeof(float)), 0);
      copy_slice_into_whole(spec, copied, rebuilt);
    }
    EXPECT_EQ(std::memcmp(rebuilt.data(), whole.data(), whole.size() * sizeof(float)), 0);
    std::fill(rebuilt.begin(), rebuilt.end(), std::nanf(""));
  }
}

// GPT-2's c_attn bias of 2 heads of width 1 is [q0 q1 k0 k1 v0 v1]: tensor rank 1 of 2 holds
// head 1 of each of Q, K and V, [q1 k1 v1], and rebuilds its place in the whole.
TEST(ParamSliceKit, ABlockedSliceTakesTheSameIntervalOfEachPart) {
  ParamSpec spec{"qkv.weight", {3, 2}, DType::f32, ParamInit::normal, 2, 6, {}};
  spec.init_std = 0.02F;
  spec.slice = {0, 1, 2, {6, 2}, 3};
  const std::vector<float> whole{0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11};
  std::vector<float> part(6);
  copy_slice_from_whole(spec, whole, part);
  EXPECT_EQ(part, (std::vector<float>{2, 3, 6, 7, 10, 11}));
  std::vector<float> rebuilt(12, -1.0F);
  copy_slice_into_whole(spec, part, rebuilt);
  EXPECT_EQ(rebuilt, (std::vector<float>{-1, -1, 2, 3, -1, -1, 6, 7, -1, -1, 10, 11}));

  ParamSpec whole_spec = spec;
  whole_spec.shape = {6, 2};
  whole_spec.slice = {};
  std::vector<float> initialised_whole(12);
  std::vector<float> initialised_part(6);
  initialize_parameter(whole_spec, 5, 2, initialised_whole);
  initialize_parameter(spec, 5, 2, initialised_part);
  copy_slice_from_whole(spec, initialised_whole, part);
  EXPECT_EQ(std::memcmp(part.data(), initialised_part.data(), part.size() * sizeof(float)), 0);

  const SliceRuns runs = slice_runs(spec);
  EXPECT_EQ(runs.count, 3U);
  EXPECT_EQ(runs.run, 2U);
  EXPECT_EQ(runs.whole_start(2), 10U);
}

TEST(ParamSliceKit, ABlockedSliceOutsideOnePartIsRefused) {
  ParamSpec spec{"qkv.bias", {4}, DType::f32, ParamInit::zeros, 1, 6, {}};
  spec.slice = {0, 1, 3, {6}, 3};  // a part has 2 entries
  EXPECT_THROW((void)slice_runs(spec), InvalidArgument);
  spec.slice = {0, 0, 1, {7}, 3};  // 7 rows are not 3 equal parts
  spec.shape = {3};
  EXPECT_THROW((void)slice_runs(spec), InvalidArgument);
}

TEST(TensorParallelPlan, APairLayerStandsOutsideColumnRowPairsAndAloneGetsTheGroupSum) {
  auto group = std::make_shared<RecordingCommunicator>(std::make_shared<EventLog>(), 2);
  const TensorParallelPlan plan(group, {Role::pair, Role::column, Role::row, Role::pair});
  EXPECT_EQ(plan.group_sum_for(0), &plan);
  EXPECT_EQ(plan.group_sum_for(1), nullptr);
  EXPECT_EQ(plan.group_sum_for(2), nullptr);
  EXPECT_EQ(plan.group_sum_for(3), &plan);
  EXPECT_THROW(TensorParallelPlan(group, {Role::column, Role::pair, Role::row}), InvalidArgument);
}

// A layer split by vocabulary sums inside itself, as a pair layer does: it gets the group, and it
// cannot sit where its input would be a slice.
TEST(TensorParallelPlan, AVocabularyLayerGetsTheGroupSumAndStandsOutsidePairs) {
  auto group = std::make_shared<RecordingCommunicator>(std::make_shared<EventLog>(), 2);
  const TensorParallelPlan plan(group, {Role::vocabulary, Role::pair, Role::vocabulary});
  EXPECT_EQ(plan.group_sum_for(0), &plan);
  EXPECT_EQ(plan.group_sum_for(2), &plan);
  try {
    TensorParallelPlan(group, {Role::column, Role::vocabulary, Role::row});
    FAIL() << "a vocabulary layer inside a column/row pair was accepted";
  } catch (const InvalidArgument& e) {
    EXPECT_NE(std::string(e.what()).find("layer 1 is split by vocabulary but sits inside the pair "
                                         "opened by layer 0"),
              std::string::npos)
        << e.what();
  }
}

TEST(TensorParallelPlan, RolesMustFormColumnThenRowPairs) {
  auto group = std::make_shared<RecordingCommunicator>(std::make_shared<EventLog>(), 2);
  EXPECT_NO_THROW(TensorParallelPlan(
      group, {Role::replicate, Role::column, Role::replicate, Role::row, Role::replicate}));
  EXPECT_THROW(TensorParallelPlan(group, {Role::row, Role::column}), InvalidArgument);
  EXPECT_THROW(TensorParallelPlan(group, {Role::column, Role::replicate}), InvalidArgument);
  EXPECT_THROW(TensorParallelPlan(group, {Role::column, Role::column, Role::row}), InvalidArgument);
}

struct PassResult {
  std::vector<float> logits;
  std::vector<float> input_gradient;
  std::vector<std::vector<float>> grads;  // whole parameters, reassembled from the slices
};

// One forward and backward of the whole model on `rank_layers`, with the loss as the head.
PassResult run_pass(const Model& model, RankLayers& rank_layers, const Tensor& x,
                    const Tensor& targets, const TensorParallelPlan* plan) {
  PassResult result;
  LayerRange range{rank_layers.layers, 0, rank_layers.layers.size(), true, plan};
  const Tensor dx = run_layers(range, x, rank_layers.hooks(), [&](Tensor logits) {
    result.logits = values_of(logits);
    return std::move(model.loss(logits, targets).grad_logits);
  });
  result.input_gradient = values_of(dx);
  return result;
}

TEST(TensorParallelMlp, MiddleLinearPairOverTwoRanksMatchesTheUnsplitModel) {
  const mlp::MlpModel model(four_linear_config());
  ASSERT_EQ(model.layer_count(), 7U);
  const auto whole = whole_parameters(model, 21);
  const Tensor x = random_tensor({5, 6}, 8);
  Tensor targets({5}, DType::i64);
  for (std::size_t i = 0; i < 5; ++i) targets.as<std::int64_t>()[i] = static_cast<int>(i % 5);

  RankLayers unsplit(model, whole);
  PassResult expected = run_pass(model, unsplit, x, targets, nullptr);
  expected.grads = unsplit.grads;

  // fc1 (layer 2) column-parallel, fc2 (layer 4) row-parallel; the rest replicated.
  const std::vector<Role> roles{Role::replicate, Role::replicate, Role::column,   Role::replicate,
                                Role::row,       Role::replicate, Role::replicate};
  std::vector<PassResult> results(2);
  std::vector<std::vector<ParamSpec>> specs(2);
  run_ranks(2, [&](std::shared_ptr<Communicator> world) {
    const int rank = world->rank();
    RankLayers mine(model, whole, roles, {rank, 2});
    const TensorParallelPlan plan(world, roles);
    auto& result = results[static_cast<std::size_t>(rank)];
    result = run_pass(model, mine, x, targets, &plan);
    result.grads = mine.grads;
    specs[static_cast<std::size_t>(rank)] = mine.specs;
  });

  for (const auto& result : results) {
    ASSERT_EQ(result.logits.size(), expected.logits.size());
    for (std::size_t i = 0; i < expected.logits.size(); ++i) {
      EXPECT_NEAR(result.logits[i], expected.logits[i], 1e-6F) << "logit " << i;
    }
    ASSERT_EQ(result.input_gradient.size(), expected.input_gradient.size());
    for (std::size_t i = 0; i < expected.input_gradient.size(); ++i) {
      EXPECT_NEAR(result.input_gradient[i], expected.input_gradient[i], 1e-6F) << "dx " << i;
    }
  }
  // The sums give both tensor ranks the same bits, so replicated parameters stay in step.
  EXPECT_EQ(results[0].logits, results[1].logits);
  EXPECT_EQ(results[0].input_gradient, results[1].input_gradient);
  for (std::size_t p = 0; p < whole.size(); ++p) {
    std::vector<float> reassembled(whole[p].size(), std::nanf(""));
    for (std::size_t r = 0; r < 2; ++r) {
      if (specs[r][p].slice.whole()) {
        EXPECT_EQ(results[r].grads[p], results[0].grads[p]);
      }
      copy_slice_into_whole(specs[r][p], results[r].grads[p], reassembled);
    }
    for (std::size_t i = 0; i < reassembled.size(); ++i) {
      EXPECT_NEAR(reassembled[i], expected.grads[p][i], 1e-6F) << specs[0][p].name << " " << i;
    }
  }
}

// Every parameter's gradient read together from the ranks' slices is the unsplit model's (to
// 1e-5), and what every rank holds whole has the same gradient bits on each.
void expect_whole_gradients(const std::vector<RankLayers>& held, const RankLayers& unsplit,
                            const std::string& what) {
  for (std::size_t p = 0; p < unsplit.grads.size(); ++p) {
    const std::string param = what + ", " + held[0].specs[p].name;
    std::vector<float> reassembled(unsplit.grads[p].size(), std::nanf(""));
    for (const RankLayers& rank : held) {
      if (rank.specs[p].slice.whole()) {
        EXPECT_EQ(rank.grads[p], held[0].grads[p]) << param;
      }
      copy_slice_into_whole(rank.specs[p], rank.grads[p], reassembled);
    }
    for (std::size_t i = 0; i < reassembled.size(); ++i) {
      EXPECT_NEAR(reassembled[i], unsplit.grads[p][i], 1e-5F) << param << " " << i;
    }
  }
}

// A GPT of 6 heads of 3 channels, its blocks split by heads (role pair) over 2 and 3 tensor
// ranks: the logits and every gradient are the whole model's, and what every rank holds whole
// (the norms, the c_proj biases, the embeddings and the head) gets the same gradient bits on
// every rank, so it stays in step without a reduction.
TEST(TensorParallelGpt, BlocksSplitByHeadsMatchTheWholeModelAndKeepWholeGradientsEqual) {
  const gpt::GptModel model(gpt::GptConfig{{2, 6, 18, 5, 11, false}, 1});
  const auto whole = whole_parameters(model, 3);
  Tensor tokens({2, 5}, DType::i64);
  Tensor targets({2, 5}, DType::i64);
  for (std::size_t i = 0; i < 10; ++i) {
    tokens.as<std::int64_t>()[i] = static_cast<std::int64_t>((7 * i + 3) % 11);
    targets.as<std::int64_t>()[i] = static_cast<std::int64_t>((5 * i + 1) % 11);
  }
  const auto pass = [&](RankLayers& layers, const TensorParallelPlan* plan) {
    std::vector<float> logits;
    const LayerRange range{layers.layers, 0, layers.layers.size(), false, plan};
    (void)run_layers(range, tokens, layers.hooks(), [&](Tensor out) {
      logits = values_of(out);
      return std::move(model.loss(out, targets).grad_logits);
    });
    return logits;
  };
  RankLayers unsplit(model, whole);
  const auto expected_logits = pass(unsplit, nullptr);

  std::vector<Role> roles(model.layer_count(), Role::replicate);
  roles[1] = roles[2] = Role::pair;
  for (const int tp : {2, 3}) {
    const auto ranks = static_cast<std::size_t>(tp);
    std::vector<std::vector<float>> logits(ranks);
    std::vector<RankLayers> held;
    held.reserve(ranks);
    for (int r = 0; r < tp; ++r) held.emplace_back(model, whole, roles, TensorSlice{r, tp});
    run_ranks(tp, [&](std::shared_ptr<Communicator> world) {
      const auto rank = static_cast<std::size_t>(world->rank());
      const TensorParallelPlan plan(world, roles);
      logits[rank] = pass(held[rank], &plan);
    });
    for (std::size_t r = 0; r < ranks; ++r) {
      ASSERT_EQ(logits[r].size(), expected_logits.size());
      for (std::size_t i = 0; i < expected_logits.size(); ++i) {
        EXPECT_NEAR(logits[r][i], expected_logits[i], 1e-5F) << "tp " << tp << ", logit " << i;
      }
    }
    expect_whole_gradients(held, unsplit, "tp " + std::to_string(tp));
  }
}

// --- The vocabulary split (Megatron's vocabulary-parallel embedding, head and cross-entropy) ---

// Columns [begin, end) of a [rows, classes] matrix.
Tensor columns_of(const Tensor& whole, std::size_t begin, std::size_t end) {
  const std::size_t classes = whole.shape().back();
  const std::size_t rows = whole.count() / classes;
  Tensor part({rows, end - begin}, DType::f32);
  for (std::size_t r = 0; r < rows; ++r) {
    for (std::size_t c = begin; c < end; ++c) {
      part.as<float>()[r * (end - begin) + c - begin] = whole.as<float>()[r * classes + c];
    }
  }
  return part;
}

// Writes a rank's [rows, end - begin] columns into their place of a [rows, classes] vector.
void put_columns(std::vector<float>& whole, std::size_t classes, const Tensor& part,
                 std::size_t begin) {
  const std::size_t width = part.shape().back();
  const std::size_t rows = part.count() / width;
  for (std::size_t r = 0; r < rows; ++r) {
    for (std::size_t c = 0; c < width; ++c) {
      whole[r * classes + begin + c] = part.as<float>()[r * width + c];
    }
  }
}

struct RankLoss {
  LossResult result;
  std::size_t begin = 0;
};

// The loss of `logits` [rows, classes] from each of `tp` tensor ranks' columns (TensorSlice's
// ranges), over the local transport.
std::vector<RankLoss> split_cross_entropy(const Tensor& logits, const Tensor& targets, int tp) {
  const std::size_t classes = logits.shape().back();
  std::vector<RankLoss> ranks(static_cast<std::size_t>(tp));
  const layers::ComputeContext compute(1);
  run_ranks(tp, [&](std::shared_ptr<Communicator> world) {
    const int rank = world->rank();
    const TensorParallelPlan plan(world, {Role::vocabulary});
    const auto [begin, end] = TensorSlice{rank, tp}.range_of(classes);
    auto& mine = ranks[static_cast<std::size_t>(rank)];
    mine.begin = begin;
    mine.result = layers::vocabulary_parallel_cross_entropy(columns_of(logits, begin, end), targets,
                                                            {begin, end, classes, &plan}, compute);
  });
  return ranks;
}

Tensor token_targets(const std::vector<std::int64_t>& values) {
  Tensor targets({values.size()}, DType::i64);
  std::copy(values.begin(), values.end(), targets.as<std::int64_t>().begin());
  return targets;
}

// Over 2, 3 and 4 tensor ranks, for vocabularies they divide (12) and do not (11, 257, split
// unevenly, the first ranks one class more): the loss sum, the count and the correct count are
// the whole loss's, the same bits on every rank, and the ranks' gradients side by side are the
// whole gradient. Two rows are ignored; the targets fall on every rank.
TEST(VocabularyParallelCrossEntropy, GivesTheWholeLossCountsAndGradientFromEachRanksClasses) {
  const layers::ComputeContext compute(1);
  for (const std::size_t classes : {12U, 11U, 257U}) {
    const std::size_t rows = 9;
    Tensor logits({rows, classes}, DType::f32);
    std::vector<std::int64_t> targets;
    for (std::size_t i = 0; i < rows * classes; ++i) {
      logits.as<float>()[i] = 3.0F * std::sin(0.37F * static_cast<float>(i) + 0.1F);
    }
    for (std::size_t r = 0; r < rows; ++r) {
      targets.push_back(r == 2 || r == 6 ? kIgnoreTarget
                                         : static_cast<std::int64_t>((5 * r + 3) % classes));
    }
    const Tensor target = token_targets(targets);
    const LossResult whole = layers::softmax_cross_entropy(logits, target, classes, compute);
    ASSERT_EQ(whole.targets, rows - 2);
    for (const int tp : {2, 3, 4}) {
      const std::string what = std::to_string(classes) + " classes, tp " + std::to_string(tp);
      const auto ranks = split_cross_entropy(logits, target, tp);
      std::vector<float> gradient(rows * classes, std::nanf(""));
      for (const auto& rank : ranks) {
        EXPECT_NEAR(rank.result.loss_sum, whole.loss_sum, 1e-12 * whole.loss_sum) << what;
        EXPECT_EQ(rank.result.loss_sum, ranks[0].result.loss_sum) << what;
        EXPECT_EQ(rank.result.targets, whole.targets) << what;
        EXPECT_EQ(rank.result.correct, whole.correct) << what;
        put_columns(gradient, classes, rank.result.grad_logits, rank.begin);
      }
      const auto expected = whole.grad_logits.as<float>();
      for (std::size_t i = 0; i < gradient.size(); ++i) {
        ASSERT_NEAR(gradient[i], expected[i], 1e-7F) << what << ", element " << i;
      }
    }
  }
}

// The first arg-max over the whole vocabulary decides: a maximum that two ranks (or two classes
// of one rank) share counts for the earlier class, as the whole loss counts it.
TEST(VocabularyParallelCrossEntropy, CountsTheFirstArgMaxOverTheWholeVocabulary) {
  const layers::ComputeContext compute(1);
  // Six classes over two ranks: [0, 3) and [3, 6).
  const std::vector<std::vector<float>> rows{
      {0, 5, 1, 2, 5, 1},  // the maximum at 1 (rank 0) and 4 (rank 1)
      {0, 5, 1, 2, 5, 1},  //
      {0, 1, 1, 2, 5, 1},  // at 4 only
      {0, 1, 1, 5, 1, 5},  // at 3 and 5, both rank 1's
      {0, 1, 1, 5, 1, 5},  //
      {9, 1, 1, 5, 1, 5},  // ignored
  };
  const std::vector<std::int64_t> targets{4, 1, 4, 5, 3, kIgnoreTarget};
  Tensor logits({rows.size(), 6}, DType::f32);
  for (std::size_t r = 0; r < rows.size(); ++r) {
    std::copy(rows[r].begin(), rows[r].end(), logits.as<float>().begin() + 6 * r);
  }
  const Tensor target = token_targets(targets);
  const LossResult whole = layers::softmax_cross_entropy(logits, target, 6, compute);
  ASSERT_EQ(whole.correct, 3U);  // rows 1, 2 and 4
  for (const auto& rank : split_cross_entropy(logits, target, 2)) {
    EXPECT_EQ(rank.result.correct, 3U) << "rank from class " << rank.begin;
    EXPECT_EQ(rank.result.targets, 5U);
  }
}

TEST(VocabularyParallelCrossEntropy, RefusesASliceOutsideTheVocabularyAndLogitsOfAnotherWidth) {
  const layers::ComputeContext compute(1);
  const Tensor targets = token_targets({1, 2});
  auto group = std::make_shared<RecordingCommunicator>(std::make_shared<EventLog>(), 2);
  const TensorParallelPlan plan(group, {Role::vocabulary});
  EXPECT_THROW((void)layers::vocabulary_parallel_cross_entropy(Tensor({2, 4}, DType::f32), targets,
                                                               {3, 7, 6, &plan}, compute),
               InvalidArgument);
  EXPECT_THROW((void)layers::vocabulary_parallel_cross_entropy(Tensor({2, 4}, DType::f32), targets,
                                                               {0, 3, 6, &plan}, compute),
               InvalidArgument);
  EXPECT_THROW((void)layers::vocabulary_parallel_cross_entropy(Tensor({2, 3}, DType::f32), targets,
                                                               {0, 3, 6, nullptr}, compute),
               InvalidArgument);
}

// The embedding's kernels over a slice of the table: the ranks' lookups summed, then the
// positions added, are the whole lookup's bits; backward adds each id into its own rank's rows
// only, and every position on every rank.
TEST(VocabularyParallelEmbedding, SlicesOfTheTableSumToTheWholeLookupAndSplitItsGradient) {
  const layers::ComputeContext compute(1);
  const std::size_t vocab = 11;
  const std::size_t channels = 5;
  const layers::EmbeddingShape whole_shape{2, 4, channels, vocab, 6};
  const std::vector<std::int64_t> tokens{0, 10, 5, 6, 5, 4, 10, 1};
  std::vector<float> table(vocab * channels);
  std::vector<float> positions(6 * channels);
  for (std::size_t i = 0; i < table.size(); ++i) table[i] = std::sin(0.7F * static_cast<float>(i));
  for (std::size_t i = 0; i < positions.size(); ++i) {
    positions[i] = std::cos(0.3F * static_cast<float>(i));
  }
  std::vector<float> expected(tokens.size() * channels);
  layers::embedding_forward<float>(expected, tokens, table, positions, whole_shape, compute);
  std::vector<float> grad_output(expected.size());
  for (std::size_t i = 0; i < grad_output.size(); ++i) {
    grad_output[i] = 0.1F * static_cast<float>(i % 13) - 0.5F;
  }
  std::vector<float> expected_table(table.size(), 0.0F);
  std::vector<float> expected_positions(positions.size(), 0.0F);
  layers::embedding_backward<float>(expected_table, expected_positions, grad_output, tokens,
                                    whole_shape, compute);
  for (const int tp : {2, 3}) {
    std::vector<float> sum(expected.size(), 0.0F);
    std::vector<float> table_gradient(table.size(), std::nanf(""));
    for (int r = 0; r < tp; ++r) {
      const auto [first, last] = TensorSlice{r, tp}.range_of(vocab);
      layers::EmbeddingShape shape = whole_shape;
      shape.first_token = first;
      shape.table_rows = last - first;
      const std::span<const float> rows(table.data() + first * channels, (last - first) * channels);
      std::vector<float> part(expected.size());
      layers::token_embedding_forward<float>(part, tokens, rows, shape, compute);
      for (std::size_t i = 0; i < sum.size(); ++i) sum[i] += part[i];
      std::vector<float> grad_rows((last - first) * channels, 0.0F);
      std::vector<float> grad_positions(positions.size(), 0.0F);
      layers::embedding_backward<float>(grad_rows, grad_positions, grad_output, tokens, shape,
                                        compute);
      std::copy(grad_rows.begin(), grad_rows.end(), table_gradient.begin() + first * channels);
      EXPECT_EQ(grad_positions, expected_positions) << "tp " << tp << ", rank " << r;
    }
    layers::add_position_embedding<float>(sum, positions, whole_shape, compute);
    EXPECT_EQ(sum, expected) << "tp " << tp;
    EXPECT_EQ(table_gradient, expected_table) << "tp " << tp;
  }
}

// The whole GPT split as hybrid splits it: the blocks by heads (pair), the embedding and the head
// by vocabulary, the loss over each rank's classes (GptModel::loss_over_vocabulary_slice), at a
// vocabulary that tp divides (12 at tp 2 and 3) and one it does not (11: 6 + 5, 4 + 4 + 3). The
// ranks' logits side by side are the whole model's, their loss is its loss on every rank (the
// same bits), every gradient read together from the slices is the whole model's, and what every
// rank holds whole (wpe, the norms, the c_proj biases) gets the same gradient bits on each.
TEST(TensorParallelGpt, TheEmbeddingAndHeadSplitByVocabularyMatchTheWholeModel) {
  for (const std::size_t vocab : {12U, 11U}) {
    const gpt::GptModel model(gpt::GptConfig{{2, 6, 18, 5, vocab, false}, 1});
    const auto whole = whole_parameters(model, 3);
    Tensor tokens({2, 5}, DType::i64);
    Tensor targets({2, 5}, DType::i64);
    for (std::size_t i = 0; i < 10; ++i) {
      tokens.as<std::int64_t>()[i] = static_cast<std::int64_t>((7 * i + 3) % vocab);
      targets.as<std::int64_t>()[i] = static_cast<std::int64_t>((5 * i + 1) % vocab);
    }
    RankLayers unsplit(model, whole);
    std::vector<float> expected_logits;
    double expected_loss = 0.0;
    const LayerRange whole_range{unsplit.layers, 0, unsplit.layers.size(), false, nullptr};
    (void)run_layers(whole_range, tokens, unsplit.hooks(), [&](Tensor out) {
      expected_logits = values_of(out);
      auto result = model.loss(out, targets);
      expected_loss = result.loss_sum;
      return std::move(result.grad_logits);
    });

    std::vector<Role> roles(model.layer_count(), Role::pair);
    roles.front() = roles.back() = Role::vocabulary;
    roles[model.layer_count() - 2] = Role::replicate;  // ln_f
    for (const int tp : {2, 3}) {
      const std::string what = "vocab " + std::to_string(vocab) + ", tp " + std::to_string(tp);
      const auto ranks = static_cast<std::size_t>(tp);
      std::vector<float> logits(expected_logits.size(), std::nanf(""));
      std::vector<double> losses(ranks);
      std::vector<RankLayers> held;
      held.reserve(ranks);
      for (int r = 0; r < tp; ++r) held.emplace_back(model, whole, roles, TensorSlice{r, tp});
      std::mutex mutex;
      run_ranks(tp, [&](std::shared_ptr<Communicator> world) {
        const auto rank = static_cast<std::size_t>(world->rank());
        const TensorParallelPlan plan(world, roles);
        const auto [begin, end] = TensorSlice{world->rank(), tp}.range_of(vocab);
        const LayerRange range{held[rank].layers, 0, held[rank].layers.size(), false, &plan};
        (void)run_layers(range, tokens, held[rank].hooks(), [&](Tensor out) {
          EXPECT_EQ(out.shape(), (Shape{2, 5, end - begin})) << what;
          {
            const std::lock_guard lock(mutex);
            put_columns(logits, vocab, out.alias().reshaped({10, end - begin}), begin);
          }
          auto result = model.loss_over_vocabulary_slice(out, targets, {begin, end, vocab, &plan});
          losses[rank] = result.loss_sum;
          return std::move(result.grad_logits);
        });
      });
      for (std::size_t i = 0; i < expected_logits.size(); ++i) {
        EXPECT_NEAR(logits[i], expected_logits[i], 1e-5F) << what << ", logit " << i;
      }
      for (std::size_t r = 0; r < ranks; ++r) {
        EXPECT_NEAR(losses[r], expected_loss, 1e-5 * expected_loss) << what;
        EXPECT_EQ(losses[r], losses[0]) << what;
      }
      expect_whole_gradients(held, unsplit, what);
      EXPECT_EQ(held[0].specs[0].name, "wte");
      EXPECT_FALSE(held[0].specs[0].slice.whole()) << what;
    }
  }
}

}  // namespace
}  // namespace tessera::testing
