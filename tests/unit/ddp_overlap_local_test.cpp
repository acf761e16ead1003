// Overlap on a real transport (local: ranks as threads, the transport's own worker doing the
// reduction): the bucket of the last layer's gradient is all-reduced, and its average is back
// in the caller's buffer, while the first layer's gradient has not been produced yet, i.e.
// before backward ends. The proof uses the communicator's issue-order guarantee: an
// all_reduce issued after the bucket's and waited for means the bucket's has completed.
#include <gtest/gtest.h>

#include <vector>

#include "ddp_test_support.hpp"
#include "tessera/strategy_kit/gradient_sync.hpp"

namespace tessera {
namespace {

TEST(GradientSynchronizerOverlap, ABucketIsAveragedOverALocalWorldBeforeBackwardEnds) {
  constexpr int kRanks = 3;
  testing::run_ranks(kRanks, [&](std::shared_ptr<Communicator> world) {
    const float rank = static_cast<float>(world->rank());
    // One flat gradient buffer, the way the ddp strategy holds it: the first layer's gradient
    // then the last layer's. A first bucket of one byte closes after the last layer's
    // gradient alone.
    std::vector<float> grads(3000);
    const std::span<float> first_layer(grads.data(), 2000);
    const std::span<float> last_layer(grads.data() + 2000, 1000);
    GradientSyncOptions options;
    options.first_bucket_bytes = 1;
    options.bucket_cap_bytes = std::size_t{1} << 30;
    GradientSynchronizer sync(world, options);
    sync.add_parameter("first", {}, first_layer);
    sync.add_parameter("last", {}, last_layer);
    for (std::size_t i = 0; i < grads.size(); ++i)
      grads[i] = rank * 3.0F + static_cast<float>(i % 5);

    // Backward reaches the last layer first.
    sync.grad_ready(1);
    // Still "inside backward": the first layer's gradient is not ready. Fence the communicator.
    double fence = 0.0;
    world->all_reduce({&fence, 1, DType::f64, Device::cpu()}, ReduceOp::sum)
        ->wait(testing::kTestTimeout);
    // average over ranks of (r * 3 + i % 5) = 3 + i % 5 for three ranks.
    for (std::size_t i = 0; i < last_layer.size(); ++i) {
      ASSERT_EQ(last_layer[i], 3.0F + static_cast<float>((2000 + i) % 5))
          << "the last layer's bucket was not averaged before backward ended (element " << i << ")";
    }
    for (std::size_t i = 0; i < first_layer.size(); ++i) {
      ASSERT_EQ(first_layer[i], rank * 3.0F + static_cast<float>(i % 5))
          << "the first layer's gradient was touched before it was ready";
    }

    sync.grad_ready(0);  // backward ends
    sync.wait(testing::kTestTimeout);
    for (std::size_t i = 0; i < grads.size(); ++i)
      ASSERT_EQ(grads[i], 3.0F + static_cast<float>(i % 5)) << "element " << i;
  });
}

}  // namespace
}  // namespace tessera
