// The bring-your-own-compute API: a host registers its own buffers and calls grad_ready.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>

#include "ddp_test_support.hpp"
#include "sgd/sgd.hpp"
#include "tessera/base/error.hpp"
#include "tessera/strategy_kit/gradient_sync.hpp"

namespace tessera {
namespace {

using testing::EventLog;
using testing::RecordingCommunicator;
using testing::run_ranks;

// A host model: three parameters in buffers of its own, not adjacent in memory.
struct HostParameters {
  std::vector<std::vector<float>> values{std::vector<float>(300), std::vector<float>(5000),
                                         std::vector<float>(70)};
  std::vector<std::vector<float>> grads{std::vector<float>(300), std::vector<float>(5000),
                                        std::vector<float>(70)};
};

GradientSyncOptions small_buckets() {
  GradientSyncOptions options;
  options.first_bucket_bytes = 1024;
  options.bucket_cap_bytes = 8 * 1024;
  return options;
}

TEST(GradientSynchronizer, HostBuffersAreAveragedOverRanksAndSteppedIdentically) {
  std::vector<std::vector<float>> finals(3);
  run_ranks(3, [&](std::shared_ptr<Communicator> world) {
    HostParameters host;
    GradientSynchronizer sync(world, small_buckets());
    for (std::size_t i = 0; i < host.values.size(); ++i) {
      for (std::size_t j = 0; j < host.values[i].size(); ++j)
        host.values[i][j] = 0.001F * static_cast<float>(j);
      sync.add_parameter("p" + std::to_string(i), host.values[i], host.grads[i]);
    }
    const sgd::SgdOptimizer optimizer(sgd::SgdConfig{0.9F, 0.0F, 0.0F, false});
    for (int step = 1; step <= 3; ++step) {
      // Backward produces the last parameter's gradient first.
      for (std::size_t i = host.grads.size(); i-- > 0;) {
        for (std::size_t j = 0; j < host.grads[i].size(); ++j) {
          host.grads[i][j] =
              static_cast<float>(world->rank() + 1) * static_cast<float>(j % 7) * 0.5F;
        }
        sync.grad_ready(i);
      }
      sync.wait(testing::kTestTimeout);
      // Ranks contribute 1x, 2x, 3x: the average is 2x, exact in binary.
      for (std::size_t i = 0; i < host.grads.size(); ++i) {
        for (std::size_t j = 0; j < host.grads[i].size(); ++j) {
          ASSERT_EQ(host.grads[i][j], 2.0F * static_cast<float>(j % 7) * 0.5F);
        }
      }
      sync.step(optimizer, StepInfo{step, 0.1F, 0});
    }
    EXPECT_GT(sync.buckets().size(), 1U);
    EXPECT_GT(sync.buffer_bytes(), 0U);  // scattered host buffers go through staging
    EXPECT_EQ(sync.optimizer_state_bytes(), 5370U * sizeof(float));
    std::vector<float> flat;
    for (const auto& v : host.values) flat.insert(flat.end(), v.begin(), v.end());
    finals[static_cast<std::size_t>(world->rank())] = flat;
  });
  EXPECT_EQ(finals[0], finals[1]);
  EXPECT_EQ(finals[0], finals[2]);
}

TEST(GradientSynchronizer, BucketsFillInReverseOrderWithASmallFirstBucket) {
  auto log = std::make_shared<EventLog>();
  auto comm = std::make_shared<RecordingCommunicator>(log, 2);
  std::vector<float> grads(4 * 1000);  // four adjacent 4000-byte gradients
  GradientSyncOptions options;
  options.first_bucket_bytes = 4000;
  options.bucket_cap_bytes = 8000;
  GradientSynchronizer sync(comm, options);
  for (std::size_t i = 0; i < 4; ++i)
    sync.add_parameter("g" + std::to_string(i), {}, {grads.data() + 1000 * i, 1000});
  sync.finalize();
  ASSERT_EQ(sync.buckets().size(), 3U);
  EXPECT_EQ(sync.buckets()[0].first, 3U);  // the last parameter alone: the first bucket is small
  EXPECT_EQ(sync.buckets()[1].first, 1U);
  EXPECT_EQ(sync.buckets()[1].last, 2U);
  EXPECT_EQ(sync.buckets()[2].first, 0U);
  EXPECT_TRUE(sync.buckets()[1].in_place);
  EXPECT_EQ(sync.buffer_bytes(), 0U);  // adjacent gradients are reduced in place
}

TEST(GradientSynchronizer, ABucketStartsTheMomentItsLastGradientIsReady) {
  auto log = std::make_shared<EventLog>();
  auto comm = std::make_shared<RecordingCommunicator>(log, 2);
  std::vector<float> grads(3000);
  GradientSyncOptions options;
  options.first_bucket_bytes = 4000;
  options.bucket_cap_bytes = 4000;
  GradientSynchronizer sync(comm, options);
  for (std::size_t i = 0; i < 3; ++i) sync.add_parameter("g", {}, {grads.data() + 1000 * i, 1000});
  sync.grad_ready(2);
  log->add("host computes the next gradient");
  sync.grad_ready(1);
  sync.grad_ready(0);
  sync.wait(testing::kTestTimeout);
  const auto events = log->events();
  ASSERT_EQ(events.size(), 4U);
  EXPECT_EQ(events[0], "all_reduce 0");
  EXPECT_EQ(events[1], "host computes the next gradient");
}

TEST(GradientSynchronizer, BucketsAreIssuedInPlanOrderEvenWhenGradientsArriveOutOfOrder) {
  auto log = std::make_shared<EventLog>();
  auto comm = std::make_shared<RecordingCommunicator>(log, 2);
  std::vector<float> grads(3000);
  GradientSyncOptions options;
  options.first_bucket_bytes = 4000;
  options.bucket_cap_bytes = 4000;
  GradientSynchronizer sync(comm, options);
  for (std::size_t i = 0; i < 3; ++i) sync.add_parameter("g", {}, {grads.data() + 1000 * i, 1000});
  sync.grad_ready(0);  // bucket 2 complete, but buckets 0 and 1 must go first
  EXPECT_TRUE(log->events().empty());
  sync.grad_ready(2);
  sync.grad_ready(1);
  sync.wait(testing::kTestTimeout);
  EXPECT_EQ(comm->all_reduce_counts, (std::vector<std::size_t>{1000, 1000, 1000}));
  EXPECT_EQ(log->events(),
            (std::vector<std::string>{"all_reduce 0", "all_reduce 1", "all_reduce 2"}));
}

TEST(GradientSynchronizer, WaitNamesAGradientThatWasNeverReady) {
  auto comm = std::make_shared<RecordingCommunicator>(std::make_shared<EventLog>(), 2);
  std::vector<float> a(10), b(10);
  GradientSynchronizer sync(comm, {});
  sync.add_parameter("encoder.weight", {}, a);
  sync.add_parameter("decoder.weight", {}, b);
  sync.grad_ready(1);
  try {
    sync.wait(testing::kTestTimeout);
    FAIL() << "wait accepted a missing gradient";
  } catch (const InvalidArgument& e) {
    EXPECT_NE(std::string(e.what()).find("encoder.weight"), std::string::npos) << e.what();
  }
}

TEST(GradientSynchronizer, MarkingAGradientTwiceInOneStepIsRefused) {
  auto comm = std::make_shared<RecordingCommunicator>(std::make_shared<EventLog>(), 2);
  std::vector<float> a(10), b(10);
  GradientSynchronizer sync(comm, {});
  sync.add_parameter("a", {}, a);
  sync.add_parameter("b", {}, b);
  sync.grad_ready(1);
  EXPECT_THROW(sync.grad_ready(1), InvalidArgument);
}

TEST(GradientSynchronizer, Bf16CompressionAveragesWithinBf16Precision) {
  run_ranks(2, [&](std::shared_ptr<Communicator> world) {
    std::vector<float> grad(1000);
    GradientSyncOptions options;
    options.compression = GradientCompression::bf16;
    GradientSynchronizer sync(world, options);
    sync.add_parameter("g", {}, grad);
    for (std::size_t j = 0; j < grad.size(); ++j) {
      grad[j] = std::sin(static_cast<float>(j)) * static_cast<float>(world->rank() + 1);
    }
    sync.grad_ready(0);
    sync.wait(testing::kTestTimeout);
    EXPECT_EQ(sync.buffer_bytes(), 1000U * 2);
    for (std::size_t j = 0; j < grad.size(); ++j) {
      const float exact = 1.5F * std::sin(static_cast<float>(j));
      ASSERT_NEAR(grad[j], exact, 0.02F * std::fabs(exact) + 1e-6F) << j;
    }
  });
}

TEST(GradientSynchronizer, ClippingScalesToTheGlobalNormAcrossAllGradients) {
  auto comm = std::make_shared<RecordingCommunicator>(std::make_shared<EventLog>(), 1);
  std::vector<float> a{3.0F}, b{4.0F};
  GradientSynchronizer sync(comm, {});
  sync.add_parameter("a", {}, a);
  sync.add_parameter("b", {}, b);
  sync.grad_ready(1);
  sync.grad_ready(0);
  sync.wait(testing::kTestTimeout);
  EXPECT_DOUBLE_EQ(sync.clip_grad_norm(1.0), 5.0);
  EXPECT_NEAR(a[0], 0.6F, 1e-6F);
  EXPECT_NEAR(b[0], 0.8F, 1e-6F);
}

// Parameters in one flat buffer (one run, crossing several fused chunks at odd offsets) plus
// one in a buffer of its own (a second run), as the ddp strategy and a host would have them.
struct FusedStepCase {
  std::vector<float> flat_params = std::vector<float>(70001);
  std::vector<float> flat_grads = std::vector<float>(70001);
  std::vector<float> own_params = std::vector<float>(5003);
  std::vector<float> own_grads = std::vector<float>(5003);

  FusedStepCase() {
    for (std::size_t i = 0; i < flat_params.size(); ++i) {
      flat_params[i] = std::cos(0.01F * static_cast<float>(i));
      flat_grads[i] = std::sin(0.3F * static_cast<float>(i));
    }
    for (std::size_t i = 0; i < own_params.size(); ++i) {
      own_params[i] = 0.5F - 0.001F * static_cast<float>(i);
      own_grads[i] = std::sin(1.7F * static_cast<float>(i));
    }
  }
  void register_with(GradientSynchronizer& sync) {
    const std::span<float> p(flat_params), g(flat_grads);
    sync.add_parameter("a", p.subspan(0, 1234), g.subspan(0, 1234));
    sync.add_parameter("b", p.subspan(1234, 60000), g.subspan(1234, 60000));
    sync.add_parameter("c", p.subspan(61234), g.subspan(61234));
    sync.add_parameter("d", own_params, own_grads);
  }
};

TEST(GradientSynchronizer, FusedUnclippedStepEqualsNormThenStepBitwiseAndZeroesGradients) {
  const sgd::SgdOptimizer optimizer(sgd::SgdConfig{0.9F, 0.0F, 0.01F, false});
  auto comm = std::make_shared<RecordingCommunicator>(std::make_shared<EventLog>(), 1);
  FusedStepCase separate, fused;
  GradientSynchronizer sync_separate(comm, {}), sync_fused(comm, {});
  separate.register_with(sync_separate);
  fused.register_with(sync_fused);
  for (std::int64_t step = 1; step <= 3; ++step) {
    const StepInfo info{step, 0.05F, 8};
    if (step > 1) {  // the fused pass zeroed them; give both the same fresh gradients
      fused.flat_grads = separate.flat_grads;
      fused.own_grads = separate.own_grads;
    }
    for (std::size_t i = 0; i < 4; ++i) {
      sync_separate.grad_ready(i);
      sync_fused.grad_ready(i);
    }
    sync_separate.wait(testing::kTestTimeout);
    sync_fused.wait(testing::kTestTimeout);
    const double norm = sync_separate.clip_grad_norm(0.0);
    sync_separate.step(optimizer, info);
    EXPECT_EQ(sync_fused.step_unclipped_and_zero(optimizer, info), norm);
    EXPECT_EQ(fused.flat_params, separate.flat_params);
    EXPECT_EQ(fused.own_params, separate.own_params);
    const auto state_fused = sync_fused.optimizer_state();
    const auto state_separate = sync_separate.optimizer_state();
    ASSERT_EQ(state_fused.size(), state_separate.size());
    EXPECT_TRUE(std::equal(state_fused.begin(), state_fused.end(), state_separate.begin()));
    EXPECT_EQ(fused.flat_grads, std::vector<float>(fused.flat_grads.size(), 0.0F));
    EXPECT_EQ(fused.own_grads, std::vector<float>(fused.own_grads.size(), 0.0F));
  }
}

// The definition the fast path must reproduce bit for bit: each block summed in element order.
std::vector<double> norm_blocks_one_by_one(const std::vector<float>& flat) {
  std::vector<double> blocks((flat.size() + kGradNormBlock - 1) / kGradNormBlock, 0.0);
  for (std::size_t i = 0; i < flat.size(); ++i)
    blocks[i / kGradNormBlock] += static_cast<double>(flat[i]) * static_cast<double>(flat[i]);
  return blocks;
}

TEST(GradNormBlocks, EqualElementOrderSumsBitwiseWhateverThePieces) {
  std::vector<float> flat(21 * kGradNormBlock + 123);
  for (std::size_t i = 0; i < flat.size(); ++i)
    flat[i] = std::sin(0.37F * static_cast<float>(i)) * (1.0F + static_cast<float>(i % 97));
  const auto expected = norm_blocks_one_by_one(flat);
  // Whole, cut off block boundaries, and cut exactly on them (the lane fast path's entry).
  const std::vector<std::vector<std::size_t>> cuts = {
      {},
      {1, 4095, 4097, 40000},
      {kGradNormBlock, 9 * kGradNormBlock, 9 * kGradNormBlock + 5, 20 * kGradNormBlock}};
  for (const auto& cut : cuts) {
    std::vector<double> blocks;
    std::size_t begin = 0;
    for (std::size_t end : cut) {
      accumulate_norm_blocks(std::span<const float>(flat).subspan(begin, end - begin), begin,
                             blocks);
      begin = end;
    }
    accumulate_norm_blocks(std::span<const float>(flat).subspan(begin), begin, blocks);
    ASSERT_EQ(blocks.size(), expected.size());
    for (std::size_t b = 0; b < blocks.size(); ++b)
      EXPECT_EQ(blocks[b], expected[b]) << "block " << b << " with " << cut.size() << " cuts";
  }
}

}  // namespace
}  // namespace tessera
