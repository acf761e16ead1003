// The layer runner: the hooks strategies hang their communication on run in a fixed order, an
// empty micro-batch still calls every one of them, and two pipeline stages that run halves of
// a model with send/recv in between produce the one-stage gradients bit for bit.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <memory>
#include <string>

#include "ddp_test_support.hpp"
#include "layer_test_support.hpp"
#include "parallel_layers_support.hpp"
#include "tessera/strategy_kit/micro_batches.hpp"

namespace tessera::testing {
namespace {

// Logs every hook call of `rank_layers` as "before 2 f", "grads 2", "after 2 b", "ready 2".
LayerHooks logging_hooks(RankLayers& rank_layers, std::vector<std::string>& log) {
  LayerHooks inner = rank_layers.hooks();
  LayerHooks hooks;
  hooks.before_layer = [inner, &log](std::size_t l, LayerPass pass) {
    log.push_back("before " + std::to_string(l) + (pass == LayerPass::forward ? " f" : " b"));
    return inner.before_layer(l, pass);
  };
  hooks.gradients = [inner, &log](std::size_t l) {
    log.push_back("grads " + std::to_string(l));
    return inner.gradients(l);
  };
  hooks.after_layer = [&log](std::size_t l, LayerPass pass) {
    log.push_back("after " + std::to_string(l) + (pass == LayerPass::forward ? " f" : " b"));
  };
  hooks.gradient_ready = [&log](std::size_t l) { log.push_back("ready " + std::to_string(l)); };
  return hooks;
}

const std::vector<std::string> kRangeOneToThree{
    "before 1 f", "after 1 f", "before 2 f", "after 2 f", "head",      "before 2 b", "grads 2",
    "after 2 b",  "ready 2",   "before 1 b", "grads 1",   "after 1 b", "ready 1"};

TEST(LayerRunner, CallsTheHooksAroundEachLayerInOrder) {
  const mlp::MlpModel model(four_linear_config());
  RankLayers rank_layers(model, whole_parameters(model, 3));
  std::vector<std::string> log;
  const LayerRange range{rank_layers.layers, 1, 3, true, nullptr};
  const Tensor x = random_tensor({2, 9}, 4);
  const Tensor dx = run_layers(range, x, logging_hooks(rank_layers, log), [&](Tensor y) {
    log.emplace_back("head");
    EXPECT_EQ(y.shape(), (Shape{2, 11}));
    return random_tensor({2, 11}, 5);
  });
  EXPECT_EQ(log, kRangeOneToThree);
  EXPECT_EQ(dx.shape(), (Shape{2, 9}));
  // Only the range's parameters got gradients: fc1 (layer 2); fc0 (layer 0) none.
  EXPECT_NE(rank_layers.grads[2], std::vector<float>(rank_layers.grads[2].size(), 0.0F));
  EXPECT_EQ(rank_layers.grads[0], std::vector<float>(rank_layers.grads[0].size(), 0.0F));
}

TEST(LayerRunner, AnEmptyMicroBatchComputesNothingButCallsEveryHook) {
  const mlp::MlpModel model(four_linear_config());
  RankLayers rank_layers(model, whole_parameters(model, 3));
  std::vector<std::string> log;
  const LayerRange range{rank_layers.layers, 1, 3, true, nullptr};
  const Tensor dx = run_layers(range, Tensor(), logging_hooks(rank_layers, log), [&](Tensor) {
    log.emplace_back("head");
    return Tensor();
  });
  auto expected = kRangeOneToThree;
  std::erase(expected, "head");
  EXPECT_EQ(log, expected);
  EXPECT_EQ(dx.count(), 0U);
  for (const auto& grad : rank_layers.grads) {
    EXPECT_EQ(grad, std::vector<float>(grad.size(), 0.0F));
  }
}

// Host memory that counts the bytes alive: what the layers' contexts hold at any moment.
class CountingAllocator final : public DeviceAllocator {
 public:
  [[nodiscard]] Device device() const noexcept override { return Device::cpu(); }
  [[nodiscard]] void* allocate(std::size_t bytes) override {
    live_ += bytes;
    return cpu_allocator()->allocate(bytes);
  }
  void deallocate(void* pointer, std::size_t bytes) noexcept override {
    live_ -= bytes;
    cpu_allocator()->deallocate(pointer, bytes);
  }
  void copy(BufferView dst, BufferView src) const override { cpu_allocator()->copy(dst, src); }
  [[nodiscard]] std::size_t live() const noexcept { return live_; }

 private:
  std::size_t live_ = 0;
};

// The identity, saving 1,000 floats of scratch per call as a real layer saves its activations,
// and noting the most bytes its allocator held alive when it was called.
class SavingLayer final : public Layer {
 public:
  SavingLayer(std::shared_ptr<CountingAllocator> memory, std::size_t& most_live)
      : memory_(std::move(memory)), most_live_(most_live) {}
  [[nodiscard]] std::string name() const override { return "saving"; }
  [[nodiscard]] std::vector<ParamSpec> parameters() const override { return {}; }
  [[nodiscard]] Shape output_shape(const Shape& input) const override { return input; }
  Tensor forward(const Tensor& input, std::span<const BufferView>,
                 LayerContext& ctx) const override {
    most_live_ = std::max(most_live_, memory_->live());
    ctx.save(Tensor({1000}, DType::f32, memory_));
    return input.alias();
  }
  Tensor backward(const Tensor& grad_output, std::span<const BufferView>,
                  std::span<const BufferView>, LayerContext&) const override {
    return grad_output.alias();
  }

 private:
  std::shared_ptr<CountingAllocator> memory_;
  std::size_t& most_live_;
};

// Evaluation keeps one layer's saved tensors alive at a time; a forward for training keeps them
// all for its backward.
TEST(LayerRunner, EvaluationReleasesEachLayersContextBeforeTheNextLayerRuns) {
  const auto memory = std::make_shared<CountingAllocator>();
  std::size_t most_live = 0;
  const SavingLayer layer(memory, most_live);
  const std::vector<const Layer*> layers(5, &layer);
  LayerHooks hooks;
  hooks.before_layer = [](std::size_t, LayerPass) { return std::vector<BufferView>{}; };
  const Tensor x = random_tensor({2, 3}, 1);

  const Tensor y = evaluate_layers({layers, 0, 5}, x, hooks);
  EXPECT_EQ(y.shape(), x.shape());
  EXPECT_EQ(most_live, 0U);  // the one before was released before each layer ran
  EXPECT_EQ(memory->live(), 0U);

  MicroBatchContexts contexts;
  (void)forward_layers({layers, 0, 5}, x, hooks, contexts);
  EXPECT_EQ(most_live, 4 * 1000 * sizeof(float));
  EXPECT_EQ(memory->live(), 5 * 1000 * sizeof(float));
}

// The identity, noting the first sample of the draw each call's context had ("-" for none).
class DrawRecordingLayer final : public Layer {
 public:
  explicit DrawRecordingLayer(std::vector<std::string>& log) : log_(log) {}
  [[nodiscard]] std::string name() const override { return "recording"; }
  [[nodiscard]] std::vector<ParamSpec> parameters() const override { return {}; }
  [[nodiscard]] Shape output_shape(const Shape& input) const override { return input; }
  Tensor forward(const Tensor& input, std::span<const BufferView>,
                 LayerContext& ctx) const override {
    note("f", ctx);
    return input.alias();
  }
  Tensor backward(const Tensor& grad_output, std::span<const BufferView>,
                  std::span<const BufferView>, LayerContext& ctx) const override {
    note("b", ctx);
    return grad_output.alias();
  }

 private:
  void note(const char* pass, const LayerContext& ctx) const {
    const auto& draw = ctx.training();
    log_.push_back(std::string(pass) + " " +
                   (draw ? std::to_string(draw->seed) + "/" + std::to_string(draw->step) + "/" +
                               std::to_string(draw->first_sample)
                         : "-"));
  }
  std::vector<std::string>& log_;
};

// A training range's draw reaches every layer's forward and, through its context, its backward;
// evaluation draws nothing, whatever the range says.
TEST(LayerRunner, ATrainingRangeHandsItsDrawToEveryLayerAndEvaluationNone) {
  std::vector<std::string> log;
  const DrawRecordingLayer layer(log);
  const std::vector<const Layer*> layers(2, &layer);
  LayerHooks hooks;
  hooks.before_layer = [](std::size_t, LayerPass) { return std::vector<BufferView>{}; };
  hooks.gradients = [](std::size_t) { return std::vector<BufferView>{}; };
  LayerRange range{layers, 0, 2};
  range.training = TrainingDraw{7, 3, 40};
  const Tensor x = random_tensor({2, 3}, 1);
  (void)run_layers(range, x, hooks, [](Tensor y) { return y; });
  EXPECT_EQ(log, (std::vector<std::string>{"f 7/3/40", "f 7/3/40", "b 7/3/40", "b 7/3/40"}));
  log.clear();
  (void)evaluate_layers(range, x, hooks);
  EXPECT_EQ(log, (std::vector<std::string>{"f -", "f -"}));
  log.clear();
  (void)run_layers({layers, 0, 2}, x, hooks, [](Tensor y) { return y; });
  EXPECT_EQ(log, (std::vector<std::string>{"f -", "f -", "b -", "b -"}));
}

TEST(LayerRunner, RefusesARangeOutsideTheModelAndMissingHooks) {
  const mlp::MlpModel model(four_linear_config());
  RankLayers rank_layers(model, whole_parameters(model, 3));
  MicroBatchContexts contexts;
  const Tensor x = random_tensor({1, 6}, 1);
  EXPECT_THROW((void)forward_layers({rank_layers.layers, 2, 8}, x, rank_layers.hooks(), contexts),
               InvalidArgument);
  EXPECT_THROW((void)forward_layers({rank_layers.layers, 0, 7}, x, LayerHooks{}, contexts),
               InvalidArgument);
}

// Linear layers [0, 2) and [2, 4) of the four: model layers [0, 4) and [4, 7).
constexpr std::size_t kStageBoundary = 4;
constexpr std::size_t kMicroBatches = 4;
constexpr std::size_t kRows = 3;

Tensor micro_batch_targets(std::size_t k) {
  Tensor targets({kRows}, DType::i64);
  for (std::size_t i = 0; i < kRows; ++i) {
    targets.as<std::int64_t>()[i] = static_cast<std::int64_t>((k + 2 * i) % 5);
  }
  return targets;
}

TEST(PipelineStages, TwoStagesWithSendRecvMatchOneStageBitwise) {
  const mlp::MlpModel model(four_linear_config());
  const auto whole = whole_parameters(model, 17);
  std::vector<Tensor> inputs;
  for (std::size_t k = 0; k < kMicroBatches; ++k) inputs.push_back(random_tensor({kRows, 6}, k));
  const auto loss_head = [&model](std::size_t k) {
    return [&model, k](Tensor logits) {
      return std::move(model.loss(logits, micro_batch_targets(k)).grad_logits);
    };
  };

  // One stage: every layer, gradients accumulated over the micro-batches in order.
  RankLayers one_stage(model, whole);
  for (std::size_t k = 0; k < kMicroBatches; ++k) {
    (void)run_layers({one_stage.layers, 0, 7}, inputs[k], one_stage.hooks(), loss_head(k));
  }

  // Two stages, GPipe order: stage 0 runs every forward, then the backwards as the gradients
  // of its activations come back; stage 1 runs each micro-batch through when it arrives.
  std::vector<std::vector<std::vector<float>>> stage_grads(2);
  run_ranks(2, [&](std::shared_ptr<Communicator> world) {
    RankLayers mine(model, whole);
    std::vector<std::shared_ptr<Work>> sends;
    std::vector<Tensor> in_flight;  // sent tensors live until their sends complete
    if (world->rank() == 0) {
      const LayerRange range{mine.layers, 0, kStageBoundary, false, nullptr};
      std::vector<MicroBatchContexts> contexts(kMicroBatches);
      for (std::size_t k = 0; k < kMicroBatches; ++k) {
        in_flight.push_back(forward_layers(range, inputs[k], mine.hooks(), contexts[k]));
        sends.push_back(world->send(in_flight.back().view(), 1, static_cast<std::uint32_t>(k)));
      }
      for (std::size_t k = 0; k < kMicroBatches; ++k) {
        Tensor grad({kRows, 11}, DType::f32);
        world->recv(grad.view(), 1, static_cast<std::uint32_t>(100 + k))->wait();
        EXPECT_EQ(backward_layers(range, std::move(grad), mine.hooks(), contexts[k]).count(), 0U);
      }
    } else {
      const LayerRange range{mine.layers, kStageBoundary, 7, true, nullptr};
      for (std::size_t k = 0; k < kMicroBatches; ++k) {
        Tensor activation({kRows, 11}, DType::f32);
        world->recv(activation.view(), 0, static_cast<std::uint32_t>(k))->wait();
        in_flight.push_back(run_layers(range, activation, mine.hooks(), loss_head(k)));
        sends.push_back(
            world->send(in_flight.back().view(), 0, static_cast<std::uint32_t>(100 + k)));
      }
    }
    for (auto& send : sends) send->wait();
    stage_grads[static_cast<std::size_t>(world->rank())] = mine.grads;
  });

  for (std::size_t p = 0; p < whole.size(); ++p) {
    const std::size_t stage = p < one_stage.layer_params[kStageBoundary].front() ? 0 : 1;
    const auto& got = stage_grads[stage][p];
    const auto& want = one_stage.grads[p];
    ASSERT_EQ(got.size(), want.size());
    EXPECT_NE(want, std::vector<float>(want.size(), 0.0F));
    EXPECT_EQ(std::memcmp(got.data(), want.data(), want.size() * sizeof(float)), 0)
        << one_stage.specs[p].name << " differs";
  }
}

}  // namespace
}  // namespace tessera::testing
